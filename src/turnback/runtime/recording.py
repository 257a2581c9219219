"""Recording one session's frames into its running turn, in wire order.

The connection's wire shows every frame from the agent to the :class:`Recorder` of the session it
names as the frame comes off the pipe, before it is dispatched (docs/design.md, invariants 1 and
3): each ``session/update``, step checkpoint (``_turnback/checkpoint``) and permission or input
request is recorded there with ``record(sync=False)`` -- an in-memory ordered append; only the
journal's flusher and the engine thread touch the disk. Step checkpoints are made durable
promptly by the reactor (they are boundary events). Problems with frames become activities,
bounded per agent process so a misbehaving agent cannot flood the session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from turnback.engine.turns import RunningTurn
from turnback.errors import InvalidEvent, OwnershipLost, TurnNotRunning
from turnback.model import ActivityLevel, EventKind
from turnback.runtime.reactor import CheckpointSaved, Notice, Reactor
from turnback.runtime.requests import PendingRequests
from turnback.runtime.rpc import CLIENT_METHODS
from turnback.runtime.wire import INTERNAL_ERROR, Frame, Rejected, UpdateFrame

CHECKPOINT_METHOD = "_turnback/checkpoint"
_KNOWN_EXTENSIONS = frozenset({CHECKPOINT_METHOD})
_MAX_FRAME_REPORTS = 20
_REQUESTS = frozenset({"session/request_permission", "elicitation/create"})

log = logging.getLogger("turnback.runtime")


class Recorder:
    """Records the frames of one agent session into the turn that runs (see the module
    docstring)."""

    def __init__(self, reactor: Reactor, requests: PendingRequests, *, relayed: bool) -> None:
        self._reactor = reactor
        self._requests = requests
        self._relayed = relayed  # a relay forwards frames: unknown methods are not ours to report
        self.live: RunningTurn | None = None  # the turn frames are recorded into
        self.agent_session: str | None = None
        self.generation = 0  # of the agent process, for request ids unique across restarts
        self.store_paths: set[str] = set()  # the agent's checkpoint stores, removed at the end
        #: told when a record finds the turn taken over by another process (OwnershipLost)
        self.on_lost: Callable[[RunningTurn], None] | None = None
        self._reports = 0

    def new_process(self, generation: int) -> None:
        self.generation = generation
        self._reports = 0

    def frame(self, frame: Frame) -> bool:
        """Record ``frame``; returns whether it needs nothing more (nobody else wants it)."""
        method = frame.get("method")
        params = frame.get("params")
        if not isinstance(params, dict):
            params = {}
        if method == "session/update":
            turn = self.live
            if turn is not None and params.get("sessionId") == self.agent_session:
                text = frame.update_text if isinstance(frame, UpdateFrame) else None
                self.record(turn, params.get("update"), text)
            # Recorded; unless relayed, the connection would only start a task for a handler
            # that does nothing.
            return not self._relayed and "id" not in frame
        if method == CHECKPOINT_METHOD:
            self._checkpoint(params)
        elif method in _REQUESTS and "id" in frame:
            if self.live is not None:
                request_id = f"{self.generation}.{frame['id']}"
                self._requests.asked(self.live, request_id, str(method), params)
        elif not self._relayed and (
            not isinstance(method, str)
            or (method not in CLIENT_METHODS and method not in _KNOWN_EXTENSIONS)
        ):
            self.report(
                "agent.method.unknown",
                f"the agent called a method turnback does not know: {str(method)[:100]!r}"
                " (request); it was answered 'method not found'"
                if "id" in frame
                else f"the agent sent an unknown notification {str(method)[:100]!r}; ignored",
                {"method": str(method)[:200]},
            )
        return False

    def record(self, turn: RunningTurn, update: Any, text: str | None = None) -> bool:
        try:
            turn.record(update, sync=False, text=text)
        except InvalidEvent as error:
            self.report(
                "agent.update.invalid",
                f"an update from the agent was not recorded: {error}",
                {"update": repr(update)[:500]},
            )
            return False
        except OwnershipLost:
            if self.on_lost is not None:
                self.on_lost(turn)
            return False
        except TurnNotRunning:
            return False
        except Exception as error:  # turnback's fault, not the agent's: the frame still goes on
            log.exception("an update from the agent could not be recorded")
            self.report(
                "turn.record.failed",
                f"an update from the agent could not be recorded: {error}",
                {"update": repr(update)[:500], "error": f"{type(error).__name__}: {error}"},
            )
            return False
        return True

    def _checkpoint(self, params: dict[str, Any]) -> None:
        turn = self.live
        if turn is None or params.get("sessionId") != self.agent_session:
            self.report(
                "agent.checkpoint.ignored",
                "the agent sent a step checkpoint outside a running turn; ignored",
                {"params": repr(params)[:500]},
            )
            return
        event: dict[str, Any] = {
            "sessionUpdate": EventKind.STEP_CHECKPOINT.value,
            "step": params.get("step"),
            "checkpointId": params.get("checkpointId"),
        }
        if params.get("state") is not None:
            event["state"] = params["state"]
        if params.get("storePath") is not None:
            event["storePath"] = params["storePath"]
        if self.record(turn, event):
            if isinstance(params.get("storePath"), str):
                self.store_paths.add(params["storePath"])
            self._reactor.post(CheckpointSaved(turn, int(event["step"])))

    def rejected(self, rejected: Rejected) -> None:
        data = {"frame": rejected.line.decode(errors="replace"), "error": rejected.message}
        if rejected.code == INTERNAL_ERROR:  # the line was fine; turnback failed handling it
            self.report(
                "agent.frame.failed",
                f"turnback could not handle a message from the agent ({rejected.message}); "
                "it was skipped",
                data,
            )
            return
        self.report(
            "agent.frame.malformed",
            f"the agent wrote a line that is not a JSON-RPC message ({rejected.message}); it "
            "was skipped",
            data,
        )

    def report(self, code: str, message: str, data: dict[str, Any]) -> None:
        self._reports += 1
        if self._reports > _MAX_FRAME_REPORTS:
            return
        if self._reports == _MAX_FRAME_REPORTS:
            message += " (further problems with this agent run are not reported)"
        turn = self.live.token if self.live is not None else None
        self._reactor.post(Notice(ActivityLevel.WARNING, code, message, data, turn))


__all__ = ["CHECKPOINT_METHOD", "Recorder"]
