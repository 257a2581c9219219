"""``turnback ui``: a local web page to review a home's sessions, over a JSON API.

An interface like ``turnback.cli`` and ``turnback.acp``: it calls the library and renders, with no
rules of its own. Starlette and uvicorn are imported only here, when the page is served, so the
other commands do not pay for them at start-up; they come with the ``ui`` extra
(``pip install 'turnback[ui]'``), and without it :func:`serve` says so.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable

from turnback.errors import ExtraMissing

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
EVERY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def reachable_address(host: str) -> str:
    """An address of this machine that another machine can use for a server on ``host``:
    ``host`` itself, unless it stands for every address; then the address this machine's
    traffic leaves from (connecting a UDP socket sends nothing), else its name."""
    if host not in EVERY_ADDRESS:
        return host
    family, probe = (
        (socket.AF_INET6, "2001:db8::1") if host == "::" else (socket.AF_INET, "192.0.2.1")
    )
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.connect((probe, 9))
            address = str(udp.getsockname()[0])
    except OSError:
        return socket.gethostname()
    return address if address not in LOOPBACK else socket.gethostname()


def serve(
    home: str | os.PathLike[str] | None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    read_only: bool = False,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve the page until interrupted or SIGTERM. The first thing announced is the address
    with its token (after ``#``: see turnback.ui.app's security facts); a browser is opened on
    an address with a one-time token instead. ExtraMissing, before anything is opened, where
    starlette or uvicorn is not installed."""
    try:
        import uvicorn

        from turnback.ui.app import build_app
    except ModuleNotFoundError as missing:
        if (missing.name or "").partition(".")[0] not in ("starlette", "uvicorn"):
            raise
        raise ExtraMissing(
            f"`turnback ui` needs starlette and uvicorn, which a plain `pip install turnback` "
            f"leaves out ({missing.name} is missing): pip install 'turnback[ui]'"
        ) from None

    import turnback

    tb = turnback.open(home, create=False)
    try:
        token = secrets.token_urlsafe(24)
        once = secrets.token_urlsafe(24)  # the browser's: its command line is public
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP by name: asyncio sets TCP_NODELAY only on sockets that say so, and
        # without it a response's headers and body wait on the client's delayed ACK (40 ms).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        bound = sock.getsockname()[1]
        shown = reachable_address(host)
        url = f"http://{_bracketed(shown)}:{bound}/#token={token}"
        announce(url)
        sys.stdout.flush()
        if host not in LOOPBACK:
            print(
                f"warning: serving on {host}, not only this machine: anyone who can reach it "
                "and has the address above can review (and, without --read-only, revert) "
                "these sessions",
                file=sys.stderr,
            )
        app = build_app(
            tb,
            token,
            once=[once],
            read_only=read_only,
            hosts=[host, shown, socket.gethostname()],
            any_address=host in EVERY_ADDRESS,
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            server_header=False,
        )
        if open_browser:
            import webbrowser

            # this machine's browser: by loopback when served on every address
            local = host if host not in EVERY_ADDRESS else "::1" if host == "::" else "127.0.0.1"
            webbrowser.open(f"http://{_bracketed(local)}:{bound}/#token={once}")
        server = uvicorn.Server(config)

        # uvicorn stops on SIGINT and SIGTERM, then raises the signal again under the handler
        # it found; this one ends the server too, and lets an interrupted page exit 0.
        def stop(signum: int, frame: object) -> None:
            server.should_exit = True

        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.run(sockets=[sock])
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    finally:
        tb.close()


def _bracketed(host: str) -> str:
    """``host`` as it stands in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host
