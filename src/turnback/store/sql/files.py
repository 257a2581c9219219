"""Workspace checkpoints, as the rows that name them, and the files each turn changed."""

from __future__ import annotations

from collections.abc import Sequence

from turnback.jsontext import file_name
from turnback.model import FileChange
from turnback.store.sql.base import Queries
from turnback.store.sql.rows import FILE_CHANGE, SCOPED_FILE_CHANGE
from turnback.store.tx import FilesTx


class FileQueries(Queries, FilesTx):
    def release_checkpoints(self, tokens: Sequence[str]) -> None:
        self._run_many(
            "UPDATE turns SET begin_checkpoint = NULL, end_checkpoint = NULL WHERE token = ?",
            [(t,) for t in tokens],
        )
        self._run_many("DELETE FROM rescues WHERE turn = ?", [(t,) for t in tokens])
        self._run_many("DELETE FROM tool_checkpoints WHERE turn = ?", [(t,) for t in tokens])

    def release_revert_checkpoints(self, revert_ids: Sequence[int]) -> None:
        self._run_many(
            "UPDATE reverts SET target = NULL, undo_checkpoint = NULL WHERE id = ?",
            [(i,) for i in revert_ids],
        )

    def set_checkpoint(self, token: str, which: str, commit: str | None) -> None:
        column = {"begin": "begin_checkpoint", "end": "end_checkpoint"}[which]
        self._run_many(f"UPDATE turns SET {column} = ? WHERE token = ?", [(commit, token)])

    def insert_file_changes(self, token: str, scope: str, changes: Sequence[FileChange]) -> None:
        self._run_many(
            "INSERT INTO file_changes "
            '(turn, scope, path, kind, additions, deletions, "binary", old_path) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (turn, scope, path) DO UPDATE SET "
            "kind = excluded.kind, additions = excluded.additions, deletions = excluded.deletions, "
            '"binary" = excluded."binary", old_path = excluded.old_path',
            [
                (
                    token,
                    scope,
                    file_name(c.path),
                    c.kind.value,
                    c.additions,
                    c.deletions,
                    int(c.binary),
                    None if c.old_path is None else file_name(c.old_path),
                )
                for c in changes
            ],
        )

    def file_changes(self, token: str, scope: str) -> list[FileChange]:
        rows = self._all(
            f"SELECT {FILE_CHANGE.select()} FROM file_changes "
            "WHERE turn = ? AND scope = ? ORDER BY path",
            (token, scope),
        )
        return FILE_CHANGE.records(rows)

    def session_file_changes(self, session_id: str) -> dict[tuple[str, str], list[FileChange]]:
        rows = self._all(
            f"SELECT {SCOPED_FILE_CHANGE.select('f')} FROM file_changes f "
            "JOIN turns t ON t.token = f.turn "
            "WHERE t.session_id = ? ORDER BY f.turn, f.scope, f.path",
            (session_id,),
        )
        found: dict[tuple[str, str], list[FileChange]] = {}
        for key, change in SCOPED_FILE_CHANGE.records(rows):
            found.setdefault(key, []).append(change)
        return found

    def checkpoint_commits(self) -> set[str]:
        rows = self._all(
            "SELECT begin_checkpoint FROM turns UNION SELECT end_checkpoint FROM turns "
            "UNION SELECT target FROM reverts UNION SELECT undo_checkpoint FROM reverts "
            "UNION SELECT checkpoint FROM tool_checkpoints "
            "UNION SELECT undo_checkpoint FROM rescues"
        )
        return {commit for (commit,) in rows if commit}
