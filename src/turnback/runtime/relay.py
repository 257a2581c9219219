"""The seam for an application that puts the runtime's agent in front of another ACP client.

The runtime alone is the agent's only client: it answers the agent and keeps what it needs. A
*relay* -- the ``turnback acp`` proxy -- sits between the agent and an editor, so the runtime must
hand it what it would otherwise keep or drop:

* ``initialize``: the editor's ``clientCapabilities``, ``clientInfo`` and ``_meta``, sent to every
  agent process the runtime starts, so the agent sees what the editor can do (files, terminals);
* ``mcp_servers``: given to the agent's ``session/new``, ``session/load`` and ``session/resume``;
* ``authenticate``: the parameters of the ``authenticate`` the editor last made, if any, sent to
  every agent process the runtime starts before it opens a session there;
* :meth:`Relay.agent_frame`: every frame from the agent, in wire order, right after the runtime
  has recorded it, with the line the agent wrote (so a relay can forward it as written).
  ``replay`` is true while the runtime reopens the agent's session after a restart, when the
  agent replays history the editor has already seen. Returning true *takes* the
  frame: the connection never dispatches it, and for a request the relay answers the agent through
  ``reply`` (bound to the agent process that asked; a reply to one that has since been replaced
  is dropped). Permission and elicitation requests are not the relay's to take: the runtime
  journals them and asks the relay through ``on_permission``/``on_input`` like any embedder;
* :meth:`Relay.backlog`: asked after each frame the relay took; while its client is slow to read,
  the runtime waits on it before reading the agent's next frame, so the agent is slowed down
  rather than the relay's memory filled;
* :meth:`Relay.activity`: every activity the runtime adds, in order with the frames, so a relay
  can tell its user about an agent crash and the resume as it happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from turnback.runtime.reactor import Notice
from turnback.runtime.wire import Frame

Reply = Callable[[Frame], Awaitable[None]]


class Relay(Protocol):
    """What a relay gives the runtime (see the module docstring)."""

    @property
    def initialize(self) -> Mapping[str, Any]: ...

    @property
    def mcp_servers(self) -> Sequence[Any]: ...

    @property
    def authenticate(self) -> Mapping[str, Any] | None: ...

    def agent_frame(self, frame: Frame, replay: bool, reply: Reply, line: bytes) -> bool: ...

    def backlog(self) -> Awaitable[None] | None:
        """Something to wait for before the runtime reads more from the agent, while the relay's
        client has not taken what it was sent; None when it keeps up."""
        ...

    def activity(self, notice: Notice) -> None: ...


__all__ = ["Relay", "Reply"]
