"""A throwaway PostgreSQL server for the tests: started once for the whole run, stopped after.

PostgreSQL refuses to run as root, and CI runs as root: then the server runs as a dedicated
system user (``turnback-pg``, created when missing) over a temporary data directory it owns. It
listens on a unix socket in that directory only, never on a network port. The suite kills client
processes, never the server, so the server may skip fsync: a committed transaction survives the
death of the client that committed it either way.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

BIN = Path(os.environ.get("TURNBACK_PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = "turnback-pg"
SUPERUSER = "turnback"


def available() -> bool:
    return (BIN / "postgres").exists()


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", USER, "--", *command]


def _server_user() -> None:
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            check=True,
            capture_output=True,
        )


class Server:
    """One running server; :meth:`url` names a database on it."""

    def __init__(self, *, fsync: bool = False) -> None:
        _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="turnback-pg-"))
        self.data = self.root / "data"
        if os.geteuid() == 0:
            entry = pwd.getpwnam(USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o755)
        subprocess.run(
            _as_server_user(
                [
                    str(BIN / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "--no-sync",
                    "--encoding=UTF8",
                    "--locale=C",
                ]
            ),
            check=True,
            capture_output=True,
        )
        options = (
            f"-k {self.root} -c listen_addresses='' -c max_connections=200 "
            f"-c fsync={'on' if fsync else 'off'} -c shared_buffers=64MB"
        )
        subprocess.run(
            _as_server_user(
                [
                    str(BIN / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-o",
                    options,
                    "-l",
                    str(self.root / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )
        self._schemas = 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{database}?host={self.root}"

    def create_schema(self) -> str:
        """The URL of a new, empty schema of its own (a store in it migrates on first open)."""
        import psycopg

        self._schemas += 1
        name = f"t{os.getpid()}_{self._schemas}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url()}&options={quote(f'-c search_path={name}')}"

    def drop_schema(self, url: str) -> None:
        import psycopg

        options = str(psycopg.conninfo.conninfo_to_dict(url)["options"])
        name = options.rsplit("=", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')

    def stop(self) -> None:
        subprocess.run(
            _as_server_user([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(self.root, ignore_errors=True)
