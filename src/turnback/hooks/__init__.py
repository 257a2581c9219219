"""Terminal agents' hooks as turnback turns: Claude Code, Codex and Gemini CLI.

``turnback hook AGENT EVENT`` runs on every prompt and tool call, so this package's face
imports nothing: :mod:`turnback.hooks.client` (the standard library only) hands the event to
the home's helper process (:mod:`turnback.hooks.helper`) when one runs, else applies it in its
own process (:mod:`turnback.hooks.events`) and starts a helper for the next one;
:mod:`turnback.hooks.install` writes and removes the agents' hook configuration.
"""
