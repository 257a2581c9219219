"""The scripted agent: a deterministic ACP agent with no model behind it.

Run it as ``python -m turnback.agents.scripted``; it speaks the Agent Client Protocol on stdin and
stdout through the official SDK, like any agent, and knows nothing of turnback. Each prompt is a
script, one command per line. Blank lines and lines starting with ``#`` are ignored; every other
line is a command, and the commands are the turn's *steps*, numbered from 1 in order.

Script language::

    write PATH TEXT      replace PATH with TEXT plus a newline (no TEXT: an empty file)
    write PATH <<END     replace PATH with the lines that follow, up to a line that is just END
    append PATH TEXT     append TEXT plus a newline to PATH (created if missing); <<END works too
    delete PATH          delete a file, a symlink or a directory tree
    rename OLD NEW       move OLD to NEW, creating NEW's parent directories
    say TEXT             stream TEXT plus a newline as agent_message_chunk updates, one per word
    think TEXT           the same as agent_thought_chunk updates
    stream N             stream N agent_message_chunk updates "chunk 1\\n" ... "chunk N\\n"
    ask TITLE            session/request_permission with options "allow" and "reject", then say
                         "permission TITLE: allowed" (or rejected); a cancelled answer ends the
                         turn with stop reason cancelled
    checkpoint           save a step checkpoint (see below)
    sleep SECONDS        wait; session/cancel interrupts it
    crash                die by SIGKILL at this point
    crash-once           die by SIGKILL the first time this step of this script is reached in
                         this state directory, and do nothing on later runs (so a resume continues)
    exit CODE            exit at once with status CODE
    fail MESSAGE         end the prompt with a JSON-RPC error carrying MESSAGE
    stop REASON          end the prompt here with stop reason REASON: end_turn, max_tokens,
                         max_turn_requests or refusal

A text block whose ``_meta.turnback.context`` is set -- the conversation so far, which turnback
puts ahead of a prompt after it opened a fresh agent session -- is context, not script: skipped.

TEXT may use the escapes ``\\n``, ``\\t`` and ``\\\\``. PATHs are single words, relative to the
session's directory, and must stay inside it. File commands act directly on disk, as a shell
command would; each is reported as a ``tool_call`` (kind edit, delete or move; status in_progress)
and a ``tool_call_update`` (status completed, or failed with the reason as text content); writes and
appends carry a ``diff`` content block. Messages and updates go out in script order, and the prompt
ends with stop reason ``end_turn``, or ``cancelled`` after ``session/cancel``.

Step checkpoints and resume. A checkpoint is the extension notification ``_turnback/checkpoint``
with ``sessionId``, ``checkpointId``, ``step`` (the last step done), ``state`` (``turnId`` and the
script's ``sha256``) and ``storePath`` (this turn's checkpoint store, a JSON file the client may
delete once the turn has ended). One is sent at every ``checkpoint`` command and after every file
command. A prompt whose ``_meta.turnback.resume`` is ``{"checkpointId", "step", "state"?}`` skips
steps up to and including ``step`` and continues with the next one, in the same turn; one whose
``step`` is null (turnback continuing a turn that crashed before any checkpoint) runs the script
from its start.

Why every file effect happens exactly once across crashes and resumes: a file command's effect is
followed by its own checkpoint, so a resume from the latest checkpoint never reaches back past an
applied effect. The one gap is a kill between the effect and that checkpoint (or a resume from an
older checkpoint than the last one sent). For it, each effect is first recorded as an intent in the
turn's store, then applied atomically (write to a temporary file and rename). A step replayed on
resume skips an effect the store shows was checkpointed, and an effect whose intent is recorded and
whose result is already on disk; in both cases it reports the recorded outcome again instead.

State lives in ``$TURNBACK_SCRIPTED_STATE`` if set, else in ``.scripted-agent/`` under the session's
directory, which holds a ``.gitignore`` of ``*`` so that snapshots and the user's git ignore it:
``sessions/<id>.json`` (the conversation, replayed by ``session/load``), ``turns/<turnId>.json``
(checkpoint stores) and ``crash-once/`` markers. The extension method ``_turnback/rollback`` with
``{"sessionId", "turns": N}`` drops the session's last N turns and returns ``{"turns": remaining}``.
The agent advertises both extensions in ``initialize``: ``_meta.turnback`` (and the same under
``agentCapabilities._meta``) is ``{"checkpoints": true, "rollback": true}``.

For crash tests, ``TURNBACK_SCRIPTED_FAULT=effect.applied`` (or ``effect.applied@STEP``) kills the
agent with SIGKILL right after a file effect is applied and before it is reported or checkpointed,
once per step as ``crash-once`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import posixpath
import re
import shutil
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

try:
    import acp
    from acp.schema import (
        AgentCapabilities,
        AllowedOutcome,
        Implementation,
        InitializeResponse,
        LoadSessionResponse,
        NewSessionResponse,
        PermissionOption,
        PromptResponse,
        SessionNotification,
        StopReason,
        TextContentBlock,
        ToolCallLocation,
        ToolCallUpdate,
        ToolKind,
    )
except ModuleNotFoundError as missing:  # run without the `agent` extra: say so in one line
    if missing.name != "acp" or __name__ != "__main__":
        raise
    sys.exit(
        "the scripted agent needs the ACP SDK, which a plain `pip install turnback` leaves "
        "out: pip install 'turnback[agent]'"
    )

__all__ = ["ScriptError", "ScriptedAgent", "main", "parse_script"]

STATE_ENV = "TURNBACK_SCRIPTED_STATE"
FAULT_ENV = "TURNBACK_SCRIPTED_FAULT"
STATE_DIRNAME = ".scripted-agent"
CHECKPOINT_METHOD = "turnback/checkpoint"  # sent on the wire as "_turnback/checkpoint"
ROLLBACK_METHOD = "turnback/rollback"
EXTENSIONS = {"checkpoints": True, "rollback": True}

_FILE_VERBS = {"write": "edit", "append": "edit", "delete": "delete", "rename": "move"}
_TEXT_VERBS = {"say", "think", "ask", "fail"}
_BARE_VERBS = {"checkpoint", "crash", "crash-once"}
_NUMBER_VERBS = {"stream", "sleep", "exit"}
_STOP_REASONS = ("end_turn", "max_tokens", "max_turn_requests", "refusal")
VERBS = frozenset({*_FILE_VERBS, *_TEXT_VERBS, *_BARE_VERBS, *_NUMBER_VERBS, "stop"})

_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class ScriptError(ValueError):
    """A prompt that is not a valid script; nothing of it has run."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True, slots=True)
class Command:
    """One step of a script."""

    step: int
    line: int
    verb: str
    paths: tuple[str, ...] = ()
    text: str = ""
    number: float = 0.0


def parse_script(script: str) -> list[Command]:
    """Parse a whole prompt before any of it runs, so a bad script has no effect at all."""
    lines = script.splitlines()
    commands: list[Command] = []
    index = 0
    while index < len(lines):
        line_no = index + 1
        line = lines[index].strip()
        index += 1
        if not line or line.startswith("#"):
            continue
        verb, _, rest = line.partition(" ")
        rest = rest.strip()
        step = len(commands) + 1
        if verb in ("write", "append"):
            path, _, text = rest.partition(" ")
            text = text.strip()
            if text.startswith("<<"):
                tag = text[2:].strip()
                if not tag:
                    raise ScriptError(line_no, f"{verb} <<TAG needs a closing tag name")
                body: list[str] = []
                while index < len(lines) and lines[index].strip() != tag:
                    body.append(lines[index] + "\n")
                    index += 1
                if index == len(lines):
                    raise ScriptError(line_no, f"no line {tag!r} closes this {verb}")
                index += 1
                content = "".join(body)
            else:
                content = _unescape(text) + "\n" if text else ""
            commands.append(
                Command(step, line_no, verb, (_relative_path(path, line_no),), text=content)
            )
        elif verb in ("delete", "rename"):
            words = rest.split()
            wanted = 1 if verb == "delete" else 2
            if len(words) != wanted:
                usage = "delete PATH" if verb == "delete" else "rename OLD NEW"
                raise ScriptError(line_no, f"usage: {usage}")
            paths = tuple(_relative_path(word, line_no) for word in words)
            commands.append(Command(step, line_no, verb, paths))
        elif verb in _TEXT_VERBS:
            if verb in ("ask", "fail") and not rest:
                raise ScriptError(line_no, f"{verb} needs a text")
            commands.append(Command(step, line_no, verb, text=_unescape(rest)))
        elif verb in _BARE_VERBS:
            if rest:
                raise ScriptError(line_no, f"{verb} takes no arguments")
            commands.append(Command(step, line_no, verb))
        elif verb in _NUMBER_VERBS:
            commands.append(Command(step, line_no, verb, number=_number(verb, rest, line_no)))
        elif verb == "stop":
            if rest not in _STOP_REASONS:
                raise ScriptError(line_no, f"stop needs one of {', '.join(_STOP_REASONS)}")
            commands.append(Command(step, line_no, verb, text=rest))
        else:
            known = ", ".join(sorted(VERBS))
            raise ScriptError(line_no, f"unknown command {verb!r}; commands are: {known}")
    return commands


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda match: _ESCAPES.get(match[1], match[0]), text)


def _relative_path(word: str, line_no: int) -> str:
    if not word:
        raise ScriptError(line_no, "a path is missing")
    normal = posixpath.normpath(word)
    if word.startswith("/") or normal == "." or normal.split("/")[0] == "..":
        raise ScriptError(line_no, f"path {word!r} must be relative and stay inside the session")
    if normal.split("/")[0] == STATE_DIRNAME:
        raise ScriptError(line_no, f"path {word!r} is inside the agent's own state directory")
    return normal


def _number(verb: str, text: str, line_no: int) -> float:
    try:
        value = int(text) if verb in ("stream", "exit") else float(text)
    except ValueError:
        kind = "a whole number" if verb in ("stream", "exit") else "a number of seconds"
        raise ScriptError(line_no, f"{verb} needs {kind}, not {text!r}") from None
    if value < 0 or (verb == "exit" and value > 255):
        raise ScriptError(line_no, f"{verb} {text} is out of range")
    return float(value)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_json(path: Path, data: Any) -> None:
    """Replace ``path`` atomically: a reader, or the agent after SIGKILL, sees old or new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, path)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _state_dir(cwd: Path) -> Path:
    configured = os.environ.get(STATE_ENV)
    state = Path(configured) if configured else cwd / STATE_DIRNAME
    state.mkdir(parents=True, exist_ok=True)
    ignore = state / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n", encoding="utf-8")
    return state


def _is_context(block: TextContentBlock) -> bool:
    """A block turnback puts ahead of a prompt (the conversation so far): context, not script."""
    meta = block.field_meta or {}
    return isinstance(meta.get("turnback"), dict) and "context" in meta["turnback"]


def _error(message: str, **data: Any) -> acp.RequestError:
    return acp.RequestError.invalid_params({"details": message, **data})


@dataclass(slots=True)
class _Session:
    id: str
    cwd: Path
    state: Path
    turns: list[dict[str, Any]] = field(default_factory=list)
    running: asyncio.Task[StopReason] | None = None

    @property
    def history_path(self) -> Path:
        return self.state / "sessions" / f"{self.id}.json"

    def save(self) -> None:
        _write_json(
            self.history_path, {"sessionId": self.id, "cwd": str(self.cwd), "turns": self.turns}
        )


class _EffectFailed(Exception):
    pass


class _Cancelled(Exception):
    pass


class _Failed(Exception):
    pass


class _Stopped(Exception):
    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Effect:
    """A file command's planned result, recorded in the turn's store before it is applied."""

    op: str
    path: str
    to: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    new_sha: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "path": self.path,
            "to": self.to,
            "oldText": self.old_text,
            "newText": self.new_text,
            "newSha256": self.new_sha,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Effect:
        return cls(
            op=data["op"],
            path=data["path"],
            to=data.get("to"),
            old_text=data.get("oldText"),
            new_text=data.get("newText"),
            new_sha=data.get("newSha256"),
        )

    def is_on_disk(self, cwd: Path) -> bool:
        if self.op == "write":
            target = cwd / self.path
            return target.is_file() and _sha256(target.read_bytes()) == self.new_sha
        if self.op == "delete":
            return not os.path.lexists(cwd / self.path)
        assert self.to is not None
        return not os.path.lexists(cwd / self.path) and os.path.lexists(cwd / self.to)


class _Turn:
    """One run of a prompt's script: a fresh turn, or the continuation of one after a crash."""

    def __init__(
        self,
        agent: ScriptedAgent,
        session: _Session,
        commands: list[Command],
        script_sha: str,
        resume: dict[str, Any] | None,
    ) -> None:
        self.agent = agent
        self.client = agent.client
        self.session = session
        self.commands = commands
        self.script_sha = script_sha
        self.updates: list[dict[str, Any]] = []
        self.checkpoints: dict[str, int] = {}
        self.effects: dict[str, dict[str, Any]] = {}
        self.reached = 0
        self.first_step = 1
        if resume is None or resume.get("step") is None:
            # ``step: null`` is a continuation after a crash before any checkpoint: the script
            # runs from its start again (``crash-once`` markers keep it from crashing again).
            self.turn_id = uuid.uuid4().hex
        else:
            self.turn_id, step = self._resume_point(resume)
            self.first_step = step + 1
            self._load_store(step)
        self.store_path = session.state / "turns" / f"{self.turn_id}.json"

    def _resume_point(self, resume: dict[str, Any]) -> tuple[str, int]:
        checkpoint_id, step, state = (
            resume.get("checkpointId"),
            resume.get("step"),
            resume.get("state"),
        )
        if not isinstance(checkpoint_id, str) or not isinstance(step, int) or step < 0:
            raise _error("_meta.turnback.resume needs a string checkpointId and a step >= 0")
        turn_id, _, issued_step = checkpoint_id.rpartition(":")
        if not _SAFE_ID.match(turn_id) or issued_step != str(step):
            raise _error(
                f"checkpoint {checkpoint_id!r} for step {step} was not issued by this agent"
            )
        if isinstance(state, dict) and state.get("sha256") not in (None, self.script_sha):
            raise _error(f"checkpoint {checkpoint_id!r} belongs to a different script")
        if step > len(self.commands):
            raise _error(f"step {step} is past the script's last step {len(self.commands)}")
        return turn_id, step

    def _load_store(self, step: int) -> None:
        # Without its store (deleted, or never written) the turn still continues after ``step``;
        # only the conversation before the checkpoint is then missing from the session's history.
        path = self.session.state / "turns" / f"{self.turn_id}.json"
        with contextlib.suppress(OSError, ValueError):
            store = _read_json(path)
            self.checkpoints = {str(k): int(v) for k, v in store.get("checkpoints", {}).items()}
            self.updates = list(store.get("updates", []))[: self.checkpoints.get(str(step), 0)]
            self.effects = dict(store.get("effects", {}))
            self.reached = int(store.get("reached", 0))

    def _save_store(self) -> None:
        _write_json(
            self.store_path,
            {
                "turnId": self.turn_id,
                "sessionId": self.session.id,
                "sha256": self.script_sha,
                "reached": self.reached,
                "checkpoints": self.checkpoints,
                "updates": self.updates,
                "effects": self.effects,
            },
        )

    async def run(self) -> StopReason:
        for command in self.commands[self.first_step - 1 :]:
            await self._step(command)
        return "end_turn"

    async def _send(self, update: Any) -> None:
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))
        await self.client.session_update(session_id=self.session.id, update=update)

    async def _say(self, text: str, thought: bool = False) -> None:
        words = re.findall(r"\s*\S+\s*", text) or [""]
        words[-1] += "\n"
        for word in words:
            if thought:
                await self._send(acp.update_agent_thought_text(word))
            else:
                await self._send(acp.update_agent_message_text(word))

    async def _checkpoint(self, step: int) -> None:
        # The store is written before the notification goes out: once the client holds a
        # checkpoint, everything a resume from it needs is already on disk.
        self.reached = max(self.reached, step)
        self.checkpoints[str(step)] = len(self.updates)
        self._save_store()
        await self.client.ext_notification(
            CHECKPOINT_METHOD,
            {
                "sessionId": self.session.id,
                "checkpointId": f"{self.turn_id}:{step}",
                "step": step,
                "state": {"turnId": self.turn_id, "sha256": self.script_sha},
                "storePath": str(self.store_path),
            },
        )

    async def _step(self, command: Command) -> None:
        verb = command.verb
        if verb in _FILE_VERBS:
            await self._file_command(command)
        elif verb in ("say", "think"):
            await self._say(command.text, thought=verb == "think")
        elif verb == "stream":
            for index in range(1, int(command.number) + 1):
                await self._send(acp.update_agent_message_text(f"chunk {index}\n"))
        elif verb == "ask":
            await self._ask(command)
        elif verb == "checkpoint":
            await self._checkpoint(command.step)
        elif verb == "sleep":
            await asyncio.sleep(command.number)
        elif verb == "crash":
            await self.agent.die()
        elif verb == "crash-once":
            await self._die_once(f"{self.script_sha[:16]}-{command.step}")
        elif verb == "exit":
            await self.agent.die(int(command.number))
        elif verb == "fail":
            raise _Failed(command.text)
        elif verb == "stop":
            raise _Stopped(cast(StopReason, command.text))

    async def _die_once(self, key: str) -> None:
        marker = self.session.state / "crash-once" / key
        if marker.exists():
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        await self.agent.die()

    async def _ask(self, command: Command) -> None:
        tool_call = ToolCallUpdate(
            tool_call_id=f"{self.turn_id}-{command.step}",
            title=command.text,
            kind="other",
            status="pending",
        )
        options = [
            PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        response = await self.client.request_permission(
            session_id=self.session.id, tool_call=tool_call, options=options
        )
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):
            await self._send(
                acp.update_agent_message_text(f"permission {command.text}: cancelled\n")
            )
            raise _Cancelled
        answer = {"allow": "allowed", "reject": "rejected"}.get(
            outcome.option_id, outcome.option_id
        )
        await self._send(acp.update_agent_message_text(f"permission {command.text}: {answer}\n"))

    async def _file_command(self, command: Command) -> None:
        tool_call_id = f"{self.turn_id}-{command.step}"
        cwd = self.session.cwd
        title = f"{command.verb} {' '.join(command.paths)}"
        await self._send(
            acp.start_tool_call(
                tool_call_id,
                title,
                kind=cast(ToolKind, _FILE_VERBS[command.verb]),
                status="in_progress",
                locations=[ToolCallLocation(path=str(cwd / path)) for path in command.paths],
                raw_input={"command": command.verb, "paths": list(command.paths)},
            )
        )
        outcome = await self._outcome(command)
        if "error" in outcome:
            content = acp.tool_content(acp.text_block(f"{title} failed: {outcome['error']}"))
            await self._send(acp.update_tool_call(tool_call_id, status="failed", content=[content]))
        else:
            report = _report(_Effect.from_json(outcome), cwd)
            await self._send(
                acp.update_tool_call(tool_call_id, status="completed", content=[report])
            )
        await self._checkpoint(command.step)

    async def _outcome(self, command: Command) -> dict[str, Any]:
        """Apply a file command's effect unless this turn already did, and say what it did."""
        key = str(command.step)
        recorded = self.effects.get(key)
        if recorded is not None and (
            command.step <= self.reached
            or (
                "error" not in recorded and _Effect.from_json(recorded).is_on_disk(self.session.cwd)
            )
        ):
            return recorded
        try:
            effect, apply = self._plan(command)
        except (_EffectFailed, OSError) as exc:
            outcome: dict[str, Any] = {"error": str(exc)}
        else:
            outcome = self.effects[key] = effect.to_json()
            self._save_store()  # the intent is on disk before the effect
            try:
                apply()
            except OSError as exc:
                outcome = {"error": str(exc)}
            else:
                fault = os.environ.get(FAULT_ENV, "")
                if fault in ("effect.applied", f"effect.applied@{command.step}"):
                    await self._die_once(f"{self.script_sha[:16]}-{command.step}-effect")
        self.effects[key] = outcome  # saved with the checkpoint that follows
        return outcome

    def _inside(self, relative: str, follow: bool) -> Path:
        cwd = self.session.cwd.resolve()
        target = cwd / relative
        checked = target.resolve() if follow else target.parent.resolve() / target.name
        if not checked.is_relative_to(cwd):
            raise _EffectFailed(f"{relative} leads outside the session's directory")
        return checked if follow else target

    def _plan(self, command: Command) -> tuple[_Effect, Callable[[], None]]:
        """What a file command will do to the disk as things stand, and the action doing it."""
        path = command.paths[0]
        if command.verb in ("write", "append"):
            target = self._inside(path, follow=True)
            if target.is_dir():
                raise _EffectFailed(f"{path} is a directory")
            old = target.read_bytes() if target.exists() else None
            new = command.text.encode()
            if command.verb == "append":
                new = (old or b"") + new
            effect = _Effect(
                "write",
                path,
                old_text=None if old is None else old.decode(errors="replace"),
                new_text=new.decode(errors="replace"),
                new_sha=_sha256(new),
            )
            return effect, lambda: _replace_file(target, new)
        if command.verb == "delete":
            target = self._inside(path, follow=False)
            if not os.path.lexists(target):
                raise _EffectFailed(f"{path} does not exist")
            old_text = None
            if target.is_file() and not target.is_symlink():
                old_text = target.read_bytes().decode(errors="replace")
            return _Effect("delete", path, old_text=old_text), lambda: _remove(target)
        source = self._inside(path, follow=False)
        destination = self._inside(command.paths[1], follow=False)
        if not os.path.lexists(source):
            raise _EffectFailed(f"{path} does not exist")
        if destination.is_dir() and not destination.is_symlink():
            raise _EffectFailed(f"{command.paths[1]} is a directory")

        def move() -> None:
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, destination)

        return _Effect("rename", path, to=command.paths[1]), move


def _replace_file(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.scripted-{os.getpid()}.tmp")
    temporary.write_bytes(data)
    with contextlib.suppress(OSError):
        shutil.copymode(target, temporary)
    os.replace(temporary, target)


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink()


def _report(effect: _Effect, cwd: Path) -> Any:
    if effect.op == "write":
        return acp.tool_diff_content(
            str(cwd / effect.path), effect.new_text or "", old_text=effect.old_text
        )
    if effect.op == "delete":
        return acp.tool_content(acp.text_block(f"deleted {effect.path}"))
    return acp.tool_content(acp.text_block(f"renamed {effect.path} to {effect.to}"))


class ScriptedAgent:
    """The agent's ACP methods; the SDK's router calls them with the request's fields."""

    def __init__(self, flush: Callable[[], Awaitable[None]] | None = None) -> None:
        self._client: acp.Client | None = None
        self._sessions: dict[str, _Session] = {}
        self._flush = flush

    @property
    def client(self) -> acp.Client:
        if self._client is None:
            raise RuntimeError("the scripted agent is not connected to a client")
        return self._client

    def on_connect(self, conn: acp.Client) -> None:
        self._client = conn

    async def die(self, code: int | None = None) -> NoReturn:
        """Leave abruptly, once everything sent so far has reached the pipe."""
        if self._flush is not None:
            await self._flush()
        if code is None:
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137 if code is None else code)

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True, field_meta={"turnback": dict(EXTENSIONS)}
            ),
            agent_info=Implementation(
                name="turnback-scripted", title="turnback scripted agent", version="1"
            ),
            field_meta={"turnback": dict(EXTENSIONS)},
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        directory = self._directory(cwd)
        session = _Session(uuid.uuid4().hex, directory, _state_dir(directory))
        session.save()
        self._sessions[session.id] = session
        return NewSessionResponse(session_id=session.id)

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        directory = self._directory(cwd)
        if not _SAFE_ID.match(session_id):
            raise _error(f"{session_id!r} is not a session id of this agent")
        state = _state_dir(directory)
        try:
            stored = _read_json(state / "sessions" / f"{session_id}.json")
        except (OSError, ValueError):
            raise _error(f"no session {session_id} under {state}", sessionId=session_id) from None
        session = _Session(session_id, directory, state, list(stored.get("turns", [])))
        self._sessions[session_id] = session
        for turn in session.turns:
            await self.client.session_update(
                session_id=session_id, update=acp.update_user_message_text(turn["prompt"])
            )
            for update in turn["updates"]:
                notification = SessionNotification.model_validate(
                    {"sessionId": session_id, "update": update}
                )
                await self.client.session_update(session_id=session_id, update=notification.update)
        return LoadSessionResponse()

    async def prompt(self, prompt: list[Any], session_id: str, **meta: Any) -> PromptResponse:
        session = self._session(session_id)
        if session.running is not None:
            raise _error(f"session {session_id} is already running a prompt")
        script = "\n".join(
            block.text
            for block in prompt
            if isinstance(block, TextContentBlock) and not _is_context(block)
        )
        try:
            commands = parse_script(script)
        except ScriptError as exc:
            raise _error(str(exc), line=exc.line) from None
        extension = meta.get("turnback")
        resume = extension.get("resume") if isinstance(extension, dict) else None
        if resume is not None and not isinstance(resume, dict):
            raise _error("_meta.turnback.resume must be an object")
        turn = _Turn(self, session, commands, _sha256(script.encode()), resume)
        task = asyncio.create_task(turn.run())
        session.running = task
        stop: StopReason = "end_turn"
        failure: str | None = None
        try:
            stop = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the connection is closing, not a session/cancel
            stop = "cancelled"
        except _Cancelled:
            stop = "cancelled"
        except _Stopped as exc:
            stop = exc.reason
        except _Failed as exc:
            failure = str(exc)
        finally:
            session.running = None
            if not task.done():
                task.cancel()
        session.turns.append(
            {
                "turnId": turn.turn_id,
                "prompt": script,
                "stopReason": stop if failure is None else "error",
                "updates": turn.updates,
            }
        )
        session.save()
        if failure is not None:
            raise acp.RequestError.internal_error({"details": failure})
        return PromptResponse(stop_reason=stop)

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.running is not None:
            session.running.cancel()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != ROLLBACK_METHOD:
            raise acp.RequestError.method_not_found(f"_{method}")
        session = self._session(str(params.get("sessionId")))
        turns = params.get("turns")
        if not isinstance(turns, int) or isinstance(turns, bool) or turns < 0:
            raise _error("turns must be a whole number >= 0")
        if turns > len(session.turns):
            raise _error(f"session {session.id} has only {len(session.turns)} turns, not {turns}")
        if session.running is not None:
            raise _error(f"session {session.id} is running a prompt; cancel it first")
        del session.turns[len(session.turns) - turns :]
        session.save()
        return {"turns": len(session.turns)}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise _error(
                f"session {session_id} is not open here; create it or load it first",
                sessionId=session_id,
            )
        return session

    @staticmethod
    def _directory(cwd: str) -> Path:
        directory = Path(cwd)
        if not directory.is_absolute() or not directory.is_dir():
            raise _error(f"cwd {cwd!r} must be an absolute path to a directory")
        return directory


async def _serve() -> None:
    reader, writer = await acp.stdio_streams()

    async def flush() -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.0
        while writer.transport.get_write_buffer_size() > 0 and loop.time() < deadline:
            await asyncio.sleep(0.001)

    agent = ScriptedAgent(flush)
    # The SDK's router calls only the methods an agent has; the Agent protocol lists them all.
    await acp.run_agent(cast(acp.Agent, agent), writer, reader)


def main() -> None:
    asyncio.run(_serve())


if __name__ == "__main__":
    main()
