"""One hook event of a terminal agent applied to the engine.

Each hook is a short-lived process the agent starts for one event, with the event's JSON on
stdin (``turnback hook AGENT EVENT``). docs/design.md's "Terminal agents" says how a turn begun by
one hook process and ended by another is owned: by the agent's own process. :func:`apply` maps
one event onto the engine, through the service:

- ``SessionStart``: the agent's session is a turnback session (made on first sight, its
  workspace the hook's ``cwd``); a turn left running in it is closed (interrupted).
- the prompt (``UserPromptSubmit``, ``BeforeAgent``): a turn begins, baseline captured, with the
  prompt as the user's message (a turn still running is interrupted first: no ``Stop`` came).
- before a tool (``PreToolUse``, ``BeforeTool``): the tool call is journaled, and for a tool that
  may change files (anything but the agents' read-only tools) the workspace is checkpointed
  first -- with the repository's refs, stash and reflog before a destructive git command. A
  tool that comes outside any turn begins one, so that it still gets its checkpoint.
- after a tool (``PostToolUse``, ``PostToolUseFailure``, ``AfterTool``): its result is journaled.
- the end (``Stop``, ``AfterAgent``; ``StopFailure`` fails it): the agent's answer is journaled
  and the turn ends (capture, file changes).
- ``SessionEnd``: a turn still running is interrupted.

Nothing here may hold the agent up: :func:`apply` records a failure as an activity of the session
(where there is one), and :func:`run` returns what went wrong instead of raising it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from turnback.engine.handle import Session, Turnback, default_home
from turnback.engine.turns import RunningTurn
from turnback.errors import TurnbackError
from turnback.hooks import transcripts
from turnback.hooks.agents import AGENTS, agent_process
from turnback.model import ActivityLevel, TurnStatus
from turnback.service import (
    AddActivity,
    BeginTurn,
    CreateSession,
    EndTurn,
    Recover,
    Service,
    SetAgentState,
)

SESSION_START = frozenset({"SessionStart"})
PROMPT = frozenset({"UserPromptSubmit", "BeforeAgent"})
BEFORE_TOOL = frozenset({"PreToolUse", "BeforeTool"})
AFTER_TOOL = frozenset({"PostToolUse", "PostToolUseFailure", "AfterTool"})
STOP = frozenset({"Stop", "AfterAgent"})
STOP_FAILURE = frozenset({"StopFailure"})
SESSION_END = frozenset({"SessionEnd"})
#: Every event a hook handles; others are accepted and ignored.
EVENTS = SESSION_START | PROMPT | BEFORE_TOOL | AFTER_TOOL | STOP | STOP_FAILURE | SESSION_END

#: The agents' tools that only read: no checkpoint is taken before them.
READ_ONLY_TOOLS = frozenset(
    {
        # Claude Code
        "Read", "Glob", "Grep", "LS", "WebFetch", "WebSearch", "TodoWrite", "Task",
        "ExitPlanMode", "BashOutput", "ListMcpResourcesTool", "ReadMcpResourceTool",
        # Gemini CLI
        "read_file", "read_many_files", "list_directory", "glob", "search_file_content",
        "google_web_search", "web_fetch", "save_memory", "write_todos",
    }
)  # fmt: skip

#: A git command that can destroy work git alone cannot give back: uncommitted edits, stashes,
#: branches, reflog entries. Before one, the repository's refs, stash and reflog are kept too.
DESTRUCTIVE_GIT = re.compile(
    r"\bgit\b(?:\s+-[Cc]\s+\S+|\s+--?[\w-]+(?:=\S+)?)*\s+(?:"
    r"reset\b[^;&|]*--(?:hard|merge|keep)\b|checkout\b[^;&|]*(?:\s--?\s|\s\.(?:\s|$)|\s-f\b)"
    r"|restore\b|clean\b|stash\s+(?:drop|clear|pop)\b|branch\s+[^;&|]*-D\b|switch\b[^;&|]*"
    r"(?:-f\b|--discard-changes)|rebase\b|update-ref\s+-d\b|reflog\s+(?:expire|delete)\b"
    r"|gc\b[^;&|]*--prune|push\b[^;&|]*(?:--force|-f\b)|filter-branch\b|rm\b)"
)

#: The most of a tool's input or output kept in its journal event.
_MAX_TEXT = 64 * 1024


def session_id_for(agent: str, agent_session: str) -> str:
    """The turnback session of an agent's session: the same id every time."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"turnback:{agent}:{agent_session}").hex


@contextlib.contextmanager
def _one_at_a_time(home: Path, session_id: str) -> Iterator[None]:
    """Hooks of one agent session, one at a time (Codex runs an event's hooks together)."""
    directory = home / "hooks"
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / f"{session_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + f"…[{len(text)} chars]"


def _bounded(value: Any) -> Any:
    """A tool's input or output, its long strings cut."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {str(k): _bounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v) for v in value[:200]]
    return value


def _summary(tool: str, tool_input: Any) -> str:
    """A tool call in one line: its command, else the path it writes."""
    if isinstance(tool_input, dict):
        for key in ("command", "file_path", "path", "notebook_path", "dir_path"):
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                line = " ".join(value.split())
                return line if len(line) <= 400 else line[:400] + "…"
    return tool


def _command(tool_input: Any) -> str:
    if isinstance(tool_input, dict):
        command = tool_input.get("command")
        if isinstance(command, list):
            return " ".join(map(str, command))
        if isinstance(command, str):
            return command
    return ""


class Hook:
    """One hook event of one agent, against one open home."""

    def __init__(self, tb: Turnback, agent: str, event: str, payload: dict[str, Any]) -> None:
        self.tb = tb
        self.service = Service.of(tb)
        self.agent = agent
        self.event = event
        self.payload = payload

    def session(self) -> Session:
        agent_session = self.payload.get("session_id")
        if not isinstance(agent_session, str) or not agent_session:
            raise ValueError(f"the {self.event} payload has no session_id")
        session_id = session_id_for(self.agent, agent_session)
        with self.tb.store.read() as tx:
            known = tx.get_session(session_id) is not None
        if known:
            return Session(self.tb, session_id)
        cwd = str(self.payload.get("cwd") or os.getcwd())
        title = f"{self.agent} {agent_session}"  # what `claude --resume` and the like take
        session = self.service.run(CreateSession(cwd, title, self.agent, session_id))
        state: dict[str, object] = {
            "hooks": self.agent,
            "session_id": agent_session,
            "transcript_path": self.payload.get("transcript_path"),
        }
        self.service.run(SetAgentState(session.id, state))
        return session

    def apply(self, session: Session) -> None:
        event = self.event
        if event in SESSION_START:
            self._close_left(session, "the agent's session started again before it ended")
        elif event in PROMPT:
            self._close_left(session, "a new prompt came before the agent said it had stopped")
            prompt = self.payload.get("prompt")
            text = prompt if isinstance(prompt, str) and prompt.strip() else "(no prompt)"
            self.service.run(BeginTurn(session.id, text))
        elif event in BEFORE_TOOL:
            self._before_tool(session)
        elif event in AFTER_TOOL:
            self._after_tool(session)
        elif event in STOP or event in STOP_FAILURE:
            self._stop(session)
        elif event in SESSION_END:
            self._close_left(session, "the agent's session ended before its turn did")

    def _close_left(self, session: Session, why: str) -> None:
        """End a turn the agent left running: interrupted if this agent runs it; recovered if
        its agent is gone; a live other agent's turn is left alone."""
        mine = self.service.call(session.continue_turn)
        if mine is not None:
            self.service.run(EndTurn(mine, TurnStatus.INTERRUPTED, why))
            return
        running = session.running()
        if running is not None and not session.is_live(running):
            self.service.run(Recover())

    #: The prompt of a turn begun by a tool event that came outside any turn.
    WENT_ON = "(the agent went on without a prompt: after its stop, or before turnback's hooks)"

    def _running(self, session: Session) -> RunningTurn | None:
        """This agent's running turn. A tool that comes outside any turn -- the agent went on
        after its stop (another Stop hook asked it to), or the hooks were installed in the
        middle of a turn -- begins one before it runs, so that no shell command goes without
        its checkpoint; anything else outside a turn has nothing to be part of (None)."""
        turn = self.service.call(session.continue_turn)
        if turn is not None or self.event not in BEFORE_TOOL:
            return turn
        self._close_left(session, "a tool came for another process's turn")
        begun = self.service.run(BeginTurn(session.id, self.WENT_ON))
        self.service.run(
            AddActivity(
                session.id,
                ActivityLevel.INFO,
                "hook.turn.begun",
                f"the {self.agent} agent ran {self.payload.get('tool_name') or 'a tool'} outside "
                f"any turn; turn {begun.number} was begun for it",
                {"agent": self.agent, "event": self.event},
                begun.token,
            )
        )
        return begun

    def _call_id(self, turn: RunningTurn, session: Session, name: str, after: bool) -> str:
        given = self.payload.get("tool_use_id")
        if isinstance(given, str) and given:
            return given
        # Gemini CLI names no call: a tool's events come in order, so the call after it is the
        # last of that tool begun; a new one is numbered by its place in the turn
        calls = [
            e.event
            for e in session.run_events(turn.token)
            if e.kind == "tool_call" and e.event.get("title") == name
        ]
        if after and calls:
            return str(calls[-1].get("toolCallId"))
        return f"{name}-{len(calls) + 1}"

    def _said(self, session: Session, turn: RunningTurn) -> set[str]:
        """Journal what the agent said since the last look, from its transcript (Claude Code's;
        the others' hooks give only the last answer); the texts the turn holds from it."""
        if self.agent != "claude":
            return set()
        call = self.payload.get("tool_use_id")
        said = transcripts.claude(
            self.payload.get("transcript_path"),
            self.payload.get("prompt_id"),
            wait_for=call if isinstance(call, str) and call else None,
        )
        if not said:
            return set()
        known = {
            e.event.get("_meta", {}).get("turnback", {}).get("said")
            for e in session.run_events(turn.token)
            if e.kind in ("agent_message_chunk", "agent_thought_chunk")
        }
        for piece in said:
            if piece.key not in known:
                update = {
                    "sessionUpdate": piece.kind,
                    "content": {"type": "text", "text": _text(piece.text)},
                    "_meta": {"turnback": {"said": piece.key}},
                }
                self.service.call(turn.record, update)
        return {piece.text for piece in said}

    def _before_tool(self, session: Session) -> None:
        turn = self._running(session)
        assert turn is not None, "a tool outside any turn begins one"
        name = str(self.payload.get("tool_name") or "tool")
        tool_input = self.payload.get("tool_input")
        call_id = self._call_id(turn, session, name, after=False)
        summary = _summary(name, tool_input)
        meta: dict[str, Any] = {}
        if name not in READ_ONLY_TOOLS:  # first: nothing read from the agent's files stops it
            destructive = bool(DESTRUCTIVE_GIT.search(_command(tool_input)))
            checkpoint = self.service.call(
                partial(turn.checkpoint_tool, git_state=destructive), name, call_id, summary
            )
            meta = {"checkpoint": checkpoint.number, "destructive": destructive}
        self._said(session, turn)
        self.service.call(
            turn.record,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": call_id,
                "title": name,
                "status": "in_progress",
                "rawInput": _bounded(tool_input),
                "_meta": {"turnback": {"summary": summary, **meta}},
            },
        )

    def _after_tool(self, session: Session) -> None:
        turn = self._running(session)
        if turn is None:
            return  # the tool ran outside any turn: there is nothing to journal it in
        name = str(self.payload.get("tool_name") or "tool")
        failed = self.event == "PostToolUseFailure"
        output = self.payload.get("tool_response", self.payload.get("error"))
        self.service.call(
            turn.record,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": self._call_id(turn, session, name, after=True),
                "status": "failed" if failed else "completed",
                "rawOutput": _bounded(output),
            },
        )

    def _stop(self, session: Session) -> None:
        turn = self._running(session)
        if turn is None:
            return  # nothing runs: this stop's turn was ended already
        answer = self.payload.get("last_assistant_message") or self.payload.get("prompt_response")
        # the last answer, unless the transcript had it already (it may be written later)
        if isinstance(answer, str) and answer and answer not in self._said(session, turn):
            content = {"type": "text", "text": _text(answer)}
            self.service.call(
                turn.record, {"sessionUpdate": "agent_message_chunk", "content": content}
            )
        if self.event in STOP_FAILURE:
            error = str(self.payload.get("error") or "the agent stopped on an error")
            self.service.run(EndTurn(turn, TurnStatus.FAILED, error))
        else:
            self.service.run(EndTurn(turn, TurnStatus.COMPLETED))


def apply(tb: Turnback, agent: str, event: str, payload: dict[str, Any]) -> None:
    """Apply one hook event on an open home whose lease names the agent's process (see the
    module's docstring); raises what goes wrong, recorded as an activity where it can be."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}: one of {', '.join(AGENTS)}")
    if event not in EVENTS:
        return
    hook = Hook(tb, agent, event, payload)
    agent_session = str(payload.get("session_id") or "")
    with _one_at_a_time(tb.home, session_id_for(agent, agent_session)):
        session = hook.session()
        try:
            hook.apply(session)
        except (TurnbackError, OSError, LookupError, ValueError, TypeError) as error:
            Service.of(tb).run(
                AddActivity(
                    session.id,
                    ActivityLevel.ERROR,
                    "hook.failed",
                    f"the {agent} hook {event} failed: {error}",
                    {"agent": agent, "event": event, "error": type(error).__name__},
                )
            )
            raise
        finally:
            tb.journal.flush()  # what the hook recorded is durable before the agent goes on


def handle(
    agent: str,
    event: str,
    payload: dict[str, Any],
    *,
    home: str | os.PathLike[str] | None = None,
    owner_pid: int | None = None,
) -> None:
    """:func:`apply` in a home opened for this one event."""
    place = Path(home).expanduser() if home is not None else default_home()
    pid = owner_pid if owner_pid is not None else agent_process(agent)
    with Turnback(place, owner_pid=pid) as tb:
        tb.push_wait = 0.0  # the agent waits for this process: the next capture pushes
        apply(tb, agent, event, payload)


def problem(error: BaseException) -> str:
    """What went wrong, in one line for the hook's standard error."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def run(
    agent: str,
    event: str,
    stdin: str,
    *,
    home: str | os.PathLike[str] | None = None,
    owner_pid: int | None = None,
) -> str | None:
    """:func:`handle` for a hook process: never raises; returns what went wrong, if anything
    (recorded as an activity where a session could be found)."""
    import json

    try:
        payload = json.loads(stdin)
        if not isinstance(payload, dict):
            raise ValueError("the hook's input is not a JSON object")
        handle(agent, event, payload, home=home, owner_pid=owner_pid)
    except BaseException as error:  # a hook must never hold up or break its agent
        return problem(error)
    return None
