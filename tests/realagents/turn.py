"""The turn every test here asks of an agent, in each model API's tool dialect: say a few
words and write NOTES with the agent's write tool, then remove the user's untracked file and
reset the repository with its shell tool, then answer."""

from __future__ import annotations

from .agents import World
from .model import Call, Reply, Text

PROMPT = "Write NOTES, then remove scratch.txt and reset the repository."
NOTES = "hello from the agent\n"
SHELL = "rm scratch.txt && git reset --hard -q"
OPENING = "I will write the notes first."
ANSWER = "NOTES is written; scratch.txt is gone and the repository is reset."


def claude(world: World) -> list[Reply]:
    """Claude Code's tools: Write (an absolute path), Bash."""
    write = Call("Write", {"file_path": str(world.workspace / "NOTES"), "content": NOTES})
    shell = Call("Bash", {"command": SHELL, "description": "Remove scratch and reset"})
    return [Reply(Text(OPENING), write), Reply(shell), Reply(Text(ANSWER))]


def codex(world: World) -> list[Reply]:
    """Codex's tools: apply_patch (free-form), exec_command."""
    patch = f"*** Begin Patch\n*** Add File: NOTES\n+{NOTES}*** End Patch\n"
    shell = Call("exec_command", {"cmd": SHELL})
    return [Reply(Text(OPENING), Call("apply_patch", patch)), Reply(shell), Reply(Text(ANSWER))]


def gemini(world: World) -> list[Reply]:
    """gemini-cli's tools: write_file, run_shell_command."""
    write = Call("write_file", {"file_path": "NOTES", "content": NOTES})
    shell = Call("run_shell_command", {"command": SHELL})
    return [Reply(Text(OPENING), write), Reply(shell), Reply(Text(ANSWER))]
