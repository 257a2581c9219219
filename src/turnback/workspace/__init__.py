"""Files on disk: workspace checkpoints in a shadow git repository per workspace.

The only package of turnback that runs git. :class:`Snapshots` captures, diffs, restores and
prunes checkpoints; :class:`CaptureBackoff` tells the engine when to try capturing again after
captures keep failing. See the README's "Workspace checkpoints", and docs/design.md's
invariants 4, 9 and 10.
"""

from __future__ import annotations

from turnback.workspace.backoff import CaptureBackoff
from turnback.workspace.snapshots import Snapshots

__all__ = ["CaptureBackoff", "Snapshots"]
