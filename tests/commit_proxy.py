"""A TCP proxy between turnback and a PostgreSQL server that can lose the reply to a COMMIT.

Armed with :meth:`CommitProxy.lose_reply`, it lets the server commit the next transaction whose
statements contain a given text, then never forwards the server's reply to its COMMIT and closes
the connection: what a client sees when the network drops, its backend is terminated or the
server fails over right after a commit. The server has committed; the client cannot know it.

It speaks just enough of PostgreSQL's wire protocol (version 3) to find transactions: the
client's statements (simple queries, and the text of prepared statements, which psycopg names
once and binds by name afterwards), and the server's CommandComplete tags. Connections are
made with ``sslmode=disable``, so every message after the start-up one is typed.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path
from urllib.parse import quote

import psycopg


class CommitProxy:
    """Listens on 127.0.0.1 and forwards each connection to the server's unix socket."""

    def __init__(self, server_socket: Path) -> None:
        self.server_socket = server_socket
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed: str | None = None
        self._refused = 0
        #: set once an armed COMMIT's reply has been lost
        self.lost = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, direct_url: str) -> str:
        """``direct_url`` (a store on the server behind) as reached through this proxy."""
        options = psycopg.conninfo.conninfo_to_dict(direct_url).get("options")
        url = (
            f"postgresql://turnback@127.0.0.1:{self.port}/postgres"
            "?sslmode=disable&gssencmode=disable"
        )
        return url + (f"&options={quote(str(options))}" if options else "")

    def lose_reply(self, containing: str) -> None:
        """Lose the reply to the COMMIT of the next transaction whose statements contain
        ``containing`` (once)."""
        with self._lock:
            self._armed = containing
            self.lost.clear()

    def refuse(self, connections: int) -> None:
        """Close the next ``connections`` connections as soon as they are made: the server is
        out of reach for a while."""
        with self._lock:
            self._refused = connections

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    # -- forwarding ----------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused, self._refused = self._refused > 0, max(0, self._refused - 1)
            if refused:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            server.connect(str(self.server_socket))
            _Connection(self, client, server).start()

    def _take(self, statements: str) -> bool:
        """Whether the COMMIT of a transaction made of ``statements`` loses its reply."""
        with self._lock:
            if self._armed is None or self._armed not in statements:
                return False
            self._armed = None
            return True


class _Connection:
    def __init__(self, proxy: CommitProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.lock = threading.Lock()
        self.statements: list[str] = []  # of the transaction under way
        self.prepared: dict[bytes, str] = {}

    def start(self) -> None:
        threading.Thread(target=self._from_client, daemon=True).start()
        threading.Thread(target=self._from_server, daemon=True).start()

    def _cut(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _from_client(self) -> None:
        buffer = b""
        started = False
        try:
            while True:
                data = self.client.recv(65536)
                if not data:
                    break
                buffer += data
                while True:
                    if not started:
                        if len(buffer) < 4:
                            break
                        (length,) = struct.unpack("!i", buffer[:4])
                        if len(buffer) < length:
                            break
                        buffer = buffer[length:]
                        started = True
                        continue
                    if len(buffer) < 5:
                        break
                    (length,) = struct.unpack("!i", buffer[1:5])
                    if len(buffer) < 1 + length:
                        break
                    self._note(buffer[:1], buffer[5 : 1 + length])
                    buffer = buffer[1 + length :]
                self.server.sendall(data)  # noted before the server can answer it
        except OSError:
            pass
        self._cut()

    def _note(self, kind: bytes, body: bytes) -> None:
        text = None
        if kind == b"Q":
            text = body.split(b"\0", 1)[0].decode()
        elif kind == b"P":
            name, query = body.split(b"\0", 2)[:2]
            text = query.decode()
            if name:
                self.prepared[name] = text
        elif kind == b"B":
            statement = body.split(b"\0", 2)[1]
            text = self.prepared.get(statement) if statement else None
        if text:
            with self.lock:
                self.statements.append(text)

    def _from_server(self) -> None:
        buffer = b""
        try:
            while True:
                data = self.server.recv(65536)
                if not data:
                    break
                buffer += data
                forward = b""
                while len(buffer) >= 5:
                    (length,) = struct.unpack("!i", buffer[1:5])
                    if len(buffer) < 1 + length:
                        break
                    message, buffer = buffer[: 1 + length], buffer[1 + length :]
                    if message[:1] == b"C":
                        tag = message[5:].split(b"\0", 1)[0]
                        if tag in (b"COMMIT", b"ROLLBACK"):
                            with self.lock:
                                statements, self.statements = "\n".join(self.statements), []
                            if tag == b"COMMIT" and self.proxy._take(statements):
                                self.client.sendall(forward)
                                self._cut()
                                self.proxy.lost.set()
                                return
                    forward += message
                if forward:
                    self.client.sendall(forward)
        except OSError:
            pass
        self._cut()
