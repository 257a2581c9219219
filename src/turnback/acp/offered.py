"""The slash commands ``turnback acp`` offers the editor next to the agent's own, answered by
:mod:`turnback.acp.commands`. Plain data: the start (:mod:`turnback.acp.launch`) names them in
its early answer to ``initialize`` before the rest of the proxy has loaded."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: the start's answer to initialize names these early
    from typing import Any

COMMANDS: tuple[dict[str, Any], ...] = (
    {
        "name": "checkpoints",
        "description": "turnback: list this session's turns with the files each changed (+/-)",
    },
    {
        "name": "diff",
        "description": "turnback: show what a turn changed (the last turn by default)",
        "input": {"hint": "[turn]"},
    },
    {
        "name": "rewind",
        "description": "turnback: rewind to turn N (0: before the first): files, conversation or "
        "both; keep-edits keeps your own edits. Shows what it would do and asks first",
        "input": {"hint": "N [files|conversation|both] [keep-edits] [confirm]"},
    },
    {
        "name": "undo-rewind",
        "description": "turnback: undo the last rewind",
    },
)
NAMES = frozenset(command["name"] for command in COMMANDS)

__all__ = ["COMMANDS", "NAMES"]
