"""Round trips to a PostgreSQL server, counted on the wire.

A round trip is the client waiting for the server: it sends, then sends nothing more until the
server has answered. :class:`RoundTrips` is a relay on a unix socket between the clients and the
server that counts exactly that: every burst of bytes a client sends after the server last sent
it something (or as the connection's first message) is one round trip. Statements sent together
in pipeline mode, or in one query string, are one burst; a statement whose result the client
reads before sending the next is one each. Nothing in turnback is changed or wrapped to count
them: a client only has to connect through the relay (:meth:`RoundTrips.url`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import urllib.parse
from pathlib import Path

_SOCKET = ".s.PGSQL.{port}"


class RoundTrips:
    """A counting relay in front of the server the URL ``url`` reaches over a unix socket."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query)
        server_dir = query.get("host", [parts.hostname or ""])[0]
        if not server_dir.startswith("/"):
            raise ValueError(f"round trips are counted over a unix socket; {url!r} names none")
        port = parts.port or int(query.get("port", ["5432"])[0])
        self._server = str(Path(server_dir) / _SOCKET.format(port=port))
        self._url = url
        self._dir = tempfile.mkdtemp(prefix="turnback-wire-")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(Path(self._dir) / _SOCKET.format(port=port)))
        self._listener.listen(64)
        self._lock = threading.Lock()
        self.count = 0
        threading.Thread(target=self._accept, name="wire-accept", daemon=True).start()

    def url(self) -> str:
        """``url`` with its host swapped for the relay's socket directory."""
        parts = urllib.parse.urlsplit(self._url)
        query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "host"]
        query.append(("host", self._dir))
        return urllib.parse.urlunsplit(
            parts._replace(query=urllib.parse.urlencode(query, quote_via=urllib.parse.quote))
        )

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._server)
            answered = [True]  # the server has answered since the client last sent
            threading.Thread(
                target=self._pump, args=(client, server, answered, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, answered, False), daemon=True
            ).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, answered: list[bool], up: bool
    ) -> None:
        try:
            while data := source.recv(65536):
                if up:
                    with self._lock:
                        if answered[0]:
                            self.count += 1
                            answered[0] = False
                else:
                    answered[0] = True  # before the client can see it, so before it answers
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()
        try:
            os.unlink(Path(self._dir) / os.listdir(self._dir)[0])
            os.rmdir(self._dir)
        except (OSError, IndexError):
            pass
