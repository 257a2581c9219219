"""The review page's web app: the page's shell, its assets and the JSON API under ``/api/``.

Some facts about its security, on which the rest relies:

* Cookies ignore ports: one set by this server is sent to every server on the same host name
  (an agent's dev server on another port of 127.0.0.1 included), which could read it and act
  with it. So nothing here is a cookie. The page's shell and its assets hold no data and no
  secret, and are served to anyone; every request under ``/api/`` must carry
  ``Authorization: Bearer KEY``, a key that only this server and the page's own script know.
  A browser never adds that header by itself, and another origin's script can neither read the
  key (the page keeps it in its origin's ``localStorage``, which is per port) nor send the
  header to this origin without a CORS preflight this app never answers. So the key is also
  the anti-forgery check: no other site can make the browser act.
* The key comes from ``POST /api/login`` with the token ``turnback ui`` printed: the address
  carries it after ``#``, which the browser never sends anywhere; the page's script posts it
  once, keeps the key and takes the token out of the address. The printed token can log in
  again (another browser, a new profile); the address a browser is started with carries a
  one-time token instead, because a command line can be read by every user of the machine:
  it logs in once, within ``ONCE_FOR`` seconds, and never again. Without a key the answer is
  401; with a wrong key or token, 403. Comparisons take constant time.
* Browsers say where a request comes from: a request under ``/api/`` whose ``Sec-Fetch-Site``
  is another site or port (``same-site`` covers other ports of this host) is refused, and so
  is a POST whose ``Origin`` is not this server, whatever else it carries.
* The Host header must name this machine (or the host served on), so a DNS-rebound name cannot
  reach the app from a web page. Served on every address (``--host 0.0.0.0``), a Host that is
  an IP address is accepted too: no name was resolved, so nothing was rebound.
* ``--read-only`` mounts no POST route at all.
* Ids from the address are checked against the shape of an id before they reach the library,
  and assets are served from a fixed table: no part of an address becomes a file path.

Every library call goes through the handle's service (:class:`~turnback.service.Service`), in
order, on its engine thread: the event loop never waits on SQLite or git.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from functools import partial
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from turnback import views
from turnback.engine.handle import Session, Turnback
from turnback.errors import (
    ACTIVITIES,
    DECIDE,
    RECOVER,
    SESSIONS,
    SHOW,
    TURNS,
    WAIT,
    AmbiguousId,
    CheckpointUnavailable,
    InvalidId,
    NothingToRevert,
    NotSetAside,
    RevertConflict,
    RollbackUnavailable,
    SessionNotFound,
    TurnbackError,
    TurnNotFound,
)
from turnback.jsontext import utf8
from turnback.model import ActivityLevel, RevertRequest, TurnStatus, conversation
from turnback.service import (
    AddActivity,
    ApplySetAside,
    DiscardSetAside,
    PlanRevert,
    RescueFiles,
    RevertSession,
    Service,
    UndoRescue,
    UndoRevert,
)

T = TypeVar("T")


#: Where the page swaps a token for its key.
LOGIN = "/api/login"
#: How long the one-time token a browser is started with can log in, in seconds.
ONCE_FOR = 120.0
_ID = re.compile(r"[0-9a-fA-F]{1,64}")
_TURN = re.compile(r"[0-9]{1,9}|[0-9a-fA-F]{1,64}")
_ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
]
# The most paths one request for a part of a patch may name.
MAX_PATHS = 200
# How often the live stream looks at the store for a change, in seconds.
POLL_INTERVAL = 0.25
# A running turn's diff is captured at most this often, in seconds, however many ask for it.
RUNNING_EVERY = 2.0

# What to do next, worded for the page's user: first from what settles the error (its structured
# ``remedy``, see turnback.errors), else from its kind; the library's message says what happened.
# The page cannot recover a dead process's work, so that one names the terminal command.
_RECOVER = (
    "run `turnback recover` in a terminal to finish it or roll it back, then reload this page"
)
_NO_SESSION = "Go back to the list of sessions; it may have been removed."
_NO_TURN = "Go back to the session's timeline to pick a turn that exists."
_NO_CHECKPOINT = (
    "The workspace checkpoint is missing, so this part cannot be shown or restored; the "
    "session's activities say why"
)
_REMEDIES: dict[str, Callable[[TurnbackError], str]] = {
    WAIT: lambda e: (
        "Wait until the other revert or undo ends, then reload and try again"
        if e.state == "reverting"
        else f"Wait until {f'turn {e.turn}' if e.turn else 'the running turn'} ends (this page "
        "shows it live), then try again"
    )
    + f"; if the program running it was stopped, {_RECOVER}.",
    RECOVER: lambda e: f"It was left half done by a program that stopped: {_RECOVER}.",
    SESSIONS: lambda e: _NO_SESSION,
    TURNS: lambda e: _NO_TURN,
    ACTIVITIES: lambda e: f"{_NO_CHECKPOINT} (`turnback activities {(e.session or '')[:12]}`).",
    DECIDE: lambda e: "Apply or discard the set-aside turns shown on the session's page.",
    SHOW: lambda e: f"Open turn {e.turn or 'it'} on the session's timeline to see what was kept.",
}
_HINTS: dict[type[TurnbackError], str] = {
    RevertConflict: "Keep a copy of your edits and revert without “keep my edits”, or leave the "
    "files as they are.",
    NothingToRevert: "There is nothing to undo: no revert of this session is left to undo.",
    NotSetAside: "Only a set-aside turn can be applied or discarded; reload to see the session "
    "as it is now.",
    CheckpointUnavailable: f"{_NO_CHECKPOINT}.",
    RollbackUnavailable: "The agent cannot roll its conversation back; revert the files only.",
    SessionNotFound: _NO_SESSION,
    TurnNotFound: _NO_TURN,
    AmbiguousId: "Use a longer id.",
    InvalidId: "Ids are hexadecimal; go back to the list of sessions.",
}
_STATUS: dict[type[TurnbackError], int] = {
    InvalidId: 400,
    AmbiguousId: 400,
    SessionNotFound: 404,
    TurnNotFound: 404,
    CheckpointUnavailable: 409,  # pruned, never taken, or on another host: the state, not a fault
}


def error_json(error: TurnbackError) -> tuple[int, dict[str, Any]]:
    """An error as the page shows it: what happened (the library's words) and what to do."""
    kind = type(error)
    worded = _REMEDIES.get(error.remedy or "")
    hint = (
        worded(error)
        if worded
        else next((h for k, h in _HINTS.items() if isinstance(error, k)), None)
    )
    status = next((s for k, s in _STATUS.items() if isinstance(error, k)), None)
    body: dict[str, Any] = {
        "type": kind.__name__,
        "message": str(error),
        "hint": hint or "Nothing was changed. Reload the page to see the state as it is now.",
    }
    for name in ("session", "turn", "state", "remedy"):
        if getattr(error, name) is not None:
            body[name] = getattr(error, name)
    if isinstance(error, RevertConflict):
        body["paths"] = list(getattr(error, "paths", ()))
    return status or (409 if error.exit_code == 3 else 500), {"error": body}


class Json(JSONResponse):
    """A JSON answer. An unpaired surrogate an agent sent (the store keeps it) is written as its
    ``\\uXXXX`` escape, the same JSON value (:func:`turnback.jsontext.utf8`), never a 500."""

    def render(self, content: Any) -> bytes:
        return utf8(json.dumps(content, ensure_ascii=False, default=str, separators=(",", ":")))


def _problem(status: int, kind: str, message: str, hint: str) -> Json:
    return Json({"error": {"type": kind, "message": message, "hint": hint}}, status)


class TokenGate:
    """ASGI middleware: the checks described at the top of this module, and ``/api/login``."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        once: Sequence[str] = (),
        hosts: Sequence[str] = (),
        any_address: bool = False,
    ) -> None:
        self.app = app
        self.token = token.encode()
        until = time.monotonic() + ONCE_FOR
        self.once = {code.encode(): until for code in once}
        self.spent: set[bytes] = set()
        self.keys: set[bytes] = set()  # the SHA-256 of each key given out
        self.hosts = {h.lower().strip("[]") for h in hosts}
        self.any_address = any_address

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refusal(scope, headers)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if scope["path"] == LOGIN:
            response = await self._login(scope, receive, headers)
            await response(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _host_allowed(self, host: str) -> bool:
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        name = name.lower().strip("[]")
        if name in self.hosts:
            return True
        if not self.any_address:
            return False
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> Response | None:
        """Why this request is refused, as the answer to give; None when it may go on."""
        host = headers.get("host", "")
        if not self._host_allowed(host):
            return _problem(
                400,
                "BadHost",
                f"this server does not answer for the host {host[:80]!r}",
                "Open the address `turnback ui` printed.",
            )
        if not scope["path"].startswith("/api/"):
            return None  # the shell and its assets: no data, no secret
        site = headers.get("sec-fetch-site", "same-origin")
        origin = headers.get("origin")
        mine = f"{scope.get('scheme', 'http')}://{host}"
        if site not in ("same-origin", "none") or (
            scope["method"] not in ("GET", "HEAD") and origin is not None and origin != mine
        ):
            return _problem(
                403,
                "Forbidden",
                "this request came from another site or another port of this machine",
                "Use the page `turnback ui` serves; another page cannot act on it.",
            )
        if scope["path"] == LOGIN:
            return None
        sent = headers.get("authorization", "")
        if not sent.startswith("Bearer "):
            return _no_access(401, "has no key")
        if hashlib.sha256(sent[7:].encode()).digest() not in self.keys:
            return _no_access(403, "has a key that is not this server's")
        return None

    async def _login(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> Response:
        """``POST /api/login`` with ``{"token"}``: a new key, ``{"key"}``."""
        if scope["method"] != "POST":
            return _problem(405, "MethodNotAllowed", "log in with a POST", "Reload the page.")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > 4096:
                return _problem(400, "BadRequest", "the login is too long", "Reload the page.")
            if not message.get("more_body"):
                break
        try:
            offered = json.loads(body)["token"].encode()
        except (ValueError, KeyError, TypeError, AttributeError):
            return _problem(
                400, "BadRequest", 'log in with {"token": …}', "Open the address printed."
            )
        if not self._accept(offered):
            spent = any(hmac.compare_digest(offered, code) for code in self.spent)
            return _no_access(
                403, "has a one-time token that was used already" if spent else "has a wrong token"
            )
        key = secrets.token_urlsafe(32)
        self.keys.add(hashlib.sha256(key.encode()).digest())
        return Json({"key": key}, headers={"cache-control": "no-store"})

    def _accept(self, offered: bytes) -> bool:
        """Whether ``offered`` is the printed token, or a one-time token not used yet (which it
        then uses up)."""
        if hmac.compare_digest(offered, self.token):
            return True
        for code, until in list(self.once.items()):
            if hmac.compare_digest(offered, code):
                del self.once[code]
                self.spent.add(code)
                return time.monotonic() <= until
        return False


def _no_access(status: int, what: str) -> Response:
    return _problem(
        status,
        "Unauthorized" if status == 401 else "Forbidden",
        f"the request {what}",
        "Open the address `turnback ui` printed (it ends in #token=…); the token changes each "
        "time the server starts.",
    )


class Api:
    """The routes: each parses and checks its part of the address, calls the library on the
    worker thread and renders the CLI's ``--json`` shape."""

    def __init__(self, tb: Turnback, read_only: bool) -> None:
        self.tb = tb
        self.read_only = read_only
        self.service = Service.of(tb)
        self._running: dict[str, tuple[float, views.DiffView]] = {}  # turn token: (when, diff)
        self._shell = (files("turnback.ui") / "static" / "index.html").read_text("utf-8")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.service.acall(partial(fn, *args, **kwargs))

    async def answer(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Response:
        try:
            data = await self.call(fn, *args, **kwargs)
        except TurnbackError as error:
            status, body = error_json(error)
            return Json(body, status)
        return Json(views.to_json(data))

    # -- checking the address ---------------------------------------------------------------

    @staticmethod
    def session_ref(request: Request) -> str:
        ref = str(request.path_params["session"])
        if not _ID.fullmatch(ref):
            raise InvalidId(f"{ref[:80]!r} is not a session id")
        return ref

    @staticmethod
    def turn_ref(request: Request, name: str = "turn") -> str:
        ref = str(request.path_params[name])
        if not _TURN.fullmatch(ref):
            raise InvalidId(f"{ref[:80]!r} is not a turn number or id")
        return ref

    @staticmethod
    def number(value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise InvalidId(f"{what} must be a turn number, not {value!r}")
        text = str(value).strip()
        if not text.isdigit() or len(text) > 9:
            raise InvalidId(f"{what} must be a turn number (0 or more), not {str(value)[:40]!r}")
        return int(text)

    def session(self, ref: str) -> Session:
        return self.tb.session(ref)

    # -- pages --------------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        config = json.dumps({"readOnly": self.read_only})
        html = self._shell.replace("{{config}}", config.replace("<", "\\u003c"))
        return HTMLResponse(html, headers={"cache-control": "no-store"})

    async def asset(self, request: Request) -> Response:
        name = str(request.path_params["name"])
        kind = _ASSETS.get(name)
        if kind is None:
            return _problem(404, "NotFound", f"no asset {name[:80]!r}", "Reload the page.")
        body = (files("turnback.ui") / "static" / name).read_bytes()
        return Response(body, media_type=kind, headers={"cache-control": "no-cache"})

    # -- reading --------------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        return await self.answer(views.sessions, self.tb)

    async def summary(self, request: Request) -> Response:
        """The session and the numbers of its conversation's turns: what a turn's page needs to
        name the session and step to the turns beside it, without the whole log."""

        def build() -> views.SummaryView:
            handle = self.session(self.session_ref(request))
            chain = conversation(handle.turns())
            return views.SummaryView(
                views.SessionView.of(handle.record),
                tuple(t.number for t in chain),
                chain[0].prompt_text if chain else None,
            )

        return await self.answer(build)

    async def log(self, request: Request) -> Response:
        return await self.answer(lambda: views.log(self.session(self.session_ref(request))))

    async def timeline(self, request: Request) -> Response:
        """What the session page shows beside ``log``: set-aside turns with the reason, the
        review mark and the latest activities."""

        def build() -> views.TimelineView:
            handle = self.session(self.session_ref(request))
            activities = handle.activities()
            return views.TimelineView(
                tuple(views.UnrecoveredView.of(u) for u in handle.unrecovered()),
                review_mark(activities),
                tuple(views.ActivityView.of(a) for a in activities[-50:]),
            )

        return await self.answer(build)

    async def turn(self, request: Request) -> Response:
        return await self.answer(
            lambda: views.show(self.session(self.session_ref(request)), self.turn_ref(request))
        )

    async def diff(self, request: Request) -> Response:
        """A turn's diff. A running turn's is the workspace now, a capture: the page asks again
        while the turn runs, and every request within ``RUNNING_EVERY`` seconds of a capture
        (any page's, with or without ``?stat``) is answered from it rather than another."""
        stat = request.query_params.get("stat") in ("1", "true")

        def build() -> views.DiffView:
            handle = self.session(self.session_ref(request))
            turn = handle.get_turn(self.turn_ref(request))
            if turn.status is not TurnStatus.RUNNING:
                return views.diff(handle, turn.token, patch=not stat)
            now = time.monotonic()
            for key, (taken, _) in list(self._running.items()):
                if now - taken >= RUNNING_EVERY:
                    del self._running[key]
            if turn.token not in self._running:
                self._running[turn.token] = (now, views.diff(handle, turn.token, patch=True))
            found = self._running[turn.token][1]
            return replace(found, patch=None) if stat else found

        return await self.answer(build)

    async def patch(self, request: Request) -> Response:
        """The patch of some of a turn's files (``?path=…``, repeated): a big turn's page asks
        for the files on screen first. Only paths the turn changed are passed on."""

        def build() -> views.PatchView:
            handle = self.session(self.session_ref(request))
            wanted = request.query_params.getlist("path")
            if not wanted or len(wanted) > MAX_PATHS:
                raise InvalidId(f"ask for 1 to {MAX_PATHS} paths at a time, not {len(wanted)}")
            found = handle.diff(self.turn_ref(request))
            changed = {f.path for f in found.files} | {f.old_path for f in found.files}
            strays = [p for p in wanted if p not in changed]
            if strays:
                raise TurnNotFound(
                    f"turn {found.turn.number} did not change {strays[0][:200]!r}"
                    + (f" (nor {len(strays) - 1} more)" if len(strays) > 1 else "")
                )
            shown = handle.diff(found.turn.token, patch=True, paths=wanted)
            return views.PatchView(tuple(wanted), shown.patch)

        return await self.answer(build)

    async def range(self, request: Request) -> Response:
        def build() -> views.RangeView:
            handle = self.session(self.session_ref(request))
            start = self.number(request.query_params.get("from", ""), "from")
            end = self.number(request.query_params.get("to", ""), "to")
            found = handle.range_diff(start, end, patch=True)
            files = tuple(views.ChangeView.of(f) for f in found.files)
            return views.RangeView(found.from_turn, found.to_turn, files, found.patch)

        return await self.answer(build)

    async def stream(self, request: Request) -> Response:
        """Server-sent events: ``log`` when the session's turns change (a turn begins or ends,
        a revert moves the head), ``running`` with the running turn's conversation as it grows."""
        try:
            handle = await self.call(self.session, self.session_ref(request))
        except TurnbackError as error:
            status, body = error_json(error)
            return Json(body, status)

        def look() -> tuple[str, str | None]:
            record = handle.record
            turns = handle.turns()
            shape = json.dumps(
                [
                    record.head,
                    record.updated_at,
                    [(t.token, t.status, t.reverted_by) for t in turns],
                ]
            )
            running = next((t for t in turns if t.status == "running"), None)
            live = None
            if running is not None:
                messages = handle.turn_messages(running.token)
                view = views.RunningView(
                    views.TurnView.of(running), tuple(views.MessageView.of(m) for m in messages)
                )
                live = json.dumps(view.to_json(), ensure_ascii=False, default=str)
            return shape, live

        async def events() -> AsyncIterator[str | bytes]:
            seen: tuple[str, str | None] = ("", None)
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                try:
                    now = await self.call(look)
                except TurnbackError as error:
                    yield f"event: problem\ndata: {json.dumps(error_json(error)[1])}\n\n"
                    return
                if now[0] != seen[0]:
                    yield f"event: log\ndata: {json.dumps(now[0])}\n\n"
                if now[1] is not None and now[1] != seen[1]:
                    yield b"event: running\ndata: " + utf8(now[1]) + b"\n\n"
                seen = now
                await asyncio.sleep(POLL_INTERVAL)

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    # -- actions (not mounted under --read-only) -----------------------------------------------

    async def body(self, request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise InvalidId("the request body is not JSON") from None
        if not isinstance(data, dict):
            raise InvalidId("the request body must be a JSON object")
        return data

    async def action(
        self, request: Request, run: Callable[[Session, dict[str, Any]], Any]
    ) -> Response:
        try:
            data = await self.body(request)
            ref = self.session_ref(request)
        except TurnbackError as error:
            status, body = error_json(error)
            return Json(body, status)
        return await self.answer(lambda: run(self.session(ref), data))

    @classmethod
    def revert_request(cls, data: Any) -> RevertRequest:
        """A revert's target and options, from a POST body or a plan's query."""
        scope = data.get("scope", "both")
        if scope not in ("both", "files", "conversation"):
            raise InvalidId(f"scope must be both, files or conversation, not {str(scope)[:40]!r}")
        keep = data.get("keep_user_edits", False)
        return RevertRequest(
            cls.number(data.get("to_turn"), "to_turn"),
            files=scope != "conversation",
            conversation=scope != "files",
            keep_user_edits=keep in (True, "1", "true"),
        )

    async def plan(self, request: Request) -> Response:
        """What a revert would do, writing nothing: as ``revert --dry-run --json``."""

        def build() -> views.PlanView:
            handle = self.session(self.session_ref(request))
            asked = self.revert_request(request.query_params)
            return views.PlanView.of(self.service.run(PlanRevert(handle.id, asked)))

        return await self.answer(build)

    async def revert(self, request: Request) -> Response:
        def run(handle: Session, data: dict[str, Any]) -> views.RevertView:
            asked = self.revert_request(data)
            return views.RevertView.of(self.service.run(RevertSession(handle.id, asked)))

        return await self.action(request, run)

    async def undo(self, request: Request) -> Response:
        def run(handle: Session, _: dict[str, Any]) -> views.RevertView:
            return views.RevertView.of(self.service.run(UndoRevert(handle.id)))

        return await self.action(request, run)

    async def points(self, request: Request) -> Response:
        """As ``rescue SESSION --turn N --json``: the turn's begin and its checkpoint before
        each shell or write tool, to bring files back from."""
        return await self.answer(
            lambda: views.rescue_points(
                self.session(self.session_ref(request)), self.turn_ref(request)
            )
        )

    async def rescue(self, request: Request) -> Response:
        """As ``rescue SESSION PATH… --turn N --before-tool K`` (``undo``: ``rescue --undo``);
        ``force`` overwrites paths changed since."""

        def run(handle: Session, data: dict[str, Any]) -> views.RescueView:
            force = data.get("force") is True
            if data.get("undo") is True:
                return views.RescueView.of(self.service.run(UndoRescue(handle.id, force)))
            paths = data.get("paths")
            if (
                not isinstance(paths, list)
                or not paths
                or not all(isinstance(p, str) and p for p in paths)
            ):
                raise InvalidId("paths must be a list of the workspace's paths to bring back")
            turn = self.number(data.get("turn"), "turn")
            before = self.number(data.get("before_tool", 0), "before_tool")
            inside = tuple(str(Path(handle.record.workspace) / path) for path in paths)
            asked = RescueFiles(handle.id, inside, turn, before, force)
            return views.RescueView.of(self.service.run(asked))

        return await self.action(request, run)

    async def set_aside(self, request: Request) -> Response:
        try:
            token = self.turn_ref(request)
        except TurnbackError as error:
            status, body = error_json(error)
            return Json(body, status)
        verb = request.path_params["verb"]
        if verb not in ("apply", "discard"):
            return _problem(404, "NotFound", f"no action {verb[:40]!r}", "Apply or discard.")

        def run(handle: Session, _: dict[str, Any]) -> views.View:
            if verb == "apply":
                applied = self.service.run(ApplySetAside(handle.id, token))
                return views.AppliedView(views.TurnView.of(applied))
            return views.DiscardedView(token, self.service.run(DiscardSetAside(handle.id, token)))

        return await self.action(request, run)

    async def mark(self, request: Request) -> Response:
        def run(handle: Session, data: dict[str, Any]) -> views.ReviewMarkView:
            number = self.number(data.get("turn"), "turn")
            head = max((t.number for t in handle.conversation()), default=0)
            if number > head:
                raise TurnNotFound(f"session {handle.id[:12]} has turns 1 to {head}")
            said = f"reviewed up to turn {number}"
            mark = AddActivity(handle.id, ActivityLevel.INFO, REVIEW_MARK, said, {"turn": number})
            self.service.run(mark)
            return views.ReviewMarkView(number)

        return await self.action(request, run)


REVIEW_MARK = "review.marked"


def review_mark(activities: Sequence[Any]) -> int | None:
    """The turn the user last marked as reviewed on the page: the latest ``review.marked``."""
    for activity in reversed(activities):
        if activity.code == REVIEW_MARK and isinstance(activity.data.get("turn"), int):
            return int(activity.data["turn"])
    return None


def build_app(
    tb: Turnback,
    token: str,
    *,
    once: Sequence[str] = (),
    read_only: bool = False,
    hosts: Sequence[str] = (),
    any_address: bool = False,
) -> Starlette:
    """The app for one home. ``token`` is the secret the printed address carries, ``once`` the
    one-time tokens (the browser's); ``hosts`` the names it answers for besides loopback's, and
    ``any_address`` accepts a Host that is an IP address (served on every address)."""
    api = Api(tb, read_only)
    session = "/api/sessions/{session}"
    routes = [
        Route("/", api.page),
        Route("/sessions/{session}", api.page),
        Route("/sessions/{session}/turns/{turn}", api.page),
        Route("/sessions/{session}/range", api.page),
        Route("/assets/{name}", api.asset),
        Route("/api/sessions", api.sessions),
        Route(session, api.summary),
        Route(f"{session}/log", api.log),
        Route(f"{session}/timeline", api.timeline),
        Route(f"{session}/stream", api.stream),
        Route(f"{session}/range", api.range),
        Route(f"{session}/revert-plan", api.plan),
        Route(f"{session}/turns/{{turn}}", api.turn),
        Route(f"{session}/turns/{{turn}}/diff", api.diff),
        Route(f"{session}/turns/{{turn}}/patch", api.patch),
        Route(f"{session}/turns/{{turn}}/points", api.points),
    ]
    if not read_only:
        routes += [
            Route(f"{session}/revert", api.revert, methods=["POST"]),
            Route(f"{session}/undo", api.undo, methods=["POST"]),
            Route(f"{session}/rescue", api.rescue, methods=["POST"]),
            Route(f"{session}/review-mark", api.mark, methods=["POST"]),
            Route(
                f"{session}/unrecovered/{{turn}}/{{verb:str}}",
                api.set_aside,
                methods=["POST"],
            ),
        ]
    gate = Middleware(
        TokenGate,
        token=token,
        once=once,
        hosts=[*hosts, "127.0.0.1", "localhost", "::1"],
        any_address=any_address,
    )
    return Starlette(routes=routes, middleware=[gate])
