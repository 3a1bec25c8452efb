"""The SQLite backend: a log in one file, its projections in `<log>.projections` beside it.

What `store_url.backend` gives for `sqlite:///relative`, `sqlite:////absolute` or a bare
path (`rota.infrastructure.backend`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, EventStore
from rota.infrastructure.backend import Backend, Integrity, Isolation, StoreLock
from rota.infrastructure.sqlite.isolation import FileIsolation
from rota.infrastructure.sqlite.locks import FileDaemonLock
from rota.infrastructure.sqlite.log_file import sqlite_path
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.sqlite.read_only import integrity
from rota.infrastructure.stored_projections import StoredProjections

SQLITE_FOLLOW_MODULE = "rota.infrastructure.eventsourcing.sqlite"


def projections_path(log_file: str | os.PathLike[str]) -> Path:
    """`rota.db` -> `rota.db.projections`: where an SQLite log keeps its projections."""
    return Path(f"{os.fspath(log_file)}.projections")


def open_projection_file(
    path: Path, *, must_exist: bool = False, clock: Clock | None = None
) -> SQLiteProjectionStore:
    """The projection file at `path` (`no_projection_store` when `must_exist` and missing)."""
    if must_exist and not path.exists():
        raise ProjectionStoreError(
            f"no projection store in {path} ('rota replay rebuild' creates one)",
            code=PortCode.NO_PROJECTION_STORE,
        )
    return SQLiteProjectionStore(path, clock=clock)


class SQLiteBackend(Backend):
    """An SQLite store, the file `url` names (see the module docstring)."""

    def __init__(self, url: str | os.PathLike[str]) -> None:
        self.url = os.fspath(url)

    @property
    def log_file(self) -> Path:
        """The log's file (refused, `store_url_moved`, when the URL's meaning changed)."""
        return sqlite_path(self.url)

    def open_log(
        self, *, clock: Clock | None = None, create: bool = True, **settings: Any
    ) -> EventStore:
        from rota.infrastructure.sqlite.store import SQLiteStore

        return SQLiteStore(self.url, clock=clock, create=create, **settings)

    def open_projections(
        self, *, must_exist: bool = False, read_only: bool = False, clock: Clock | None = None
    ) -> SQLiteProjectionStore:
        """The projection file the URL names itself (`--projections FILE`); always writable
        (open it read-only with `replay.doctor`)."""
        return open_projection_file(self.log_file, must_exist=must_exist, clock=clock)

    def projections_beside(
        self,
        log: EventStore,
        *,
        must_exist: bool = False,
        read_only: bool = False,
        clock: Clock | None = None,
    ) -> SQLiteProjectionStore | None:
        path = log.path if log.path is not None else self.log_file
        return open_projection_file(projections_path(path), must_exist=must_exist, clock=clock)

    def daemon_lock(self, *, exclusive: bool = False) -> StoreLock:
        return FileDaemonLock(f"{self.log_file}.lock", exclusive=exclusive)

    def enable_incremental_vacuum(self) -> bool:
        from rota.infrastructure.sqlite.pruning import enable_on_path

        enable_on_path(self.log_file)
        return True

    def check_integrity(self, *, immutable: bool = False) -> Integrity:
        """SQLite's full `PRAGMA integrity_check` of the log file, through a read-only
        connection (`immutable`: one that creates no `-wal`/`-shm` either)."""
        path = self.log_file
        lines = integrity(path, immutable=immutable)
        if lines == ["ok"]:
            return Integrity(True, f"PRAGMA integrity_check of {path}: ok")
        more = f" (and {len(lines) - 3} more)" if len(lines) > 3 else ""
        return Integrity(False, f"{path}: {'; '.join(lines[:3])}{more}")

    def isolate_projections(
        self, projections: Path | StoredProjections | None, name: str
    ) -> Isolation:
        """The projection file (`projections`, or `<log>.projections`) and its companions,
        to move into `diagnostics/scheduler-recovery/NAME` beside the log
        (`sqlite.isolation`)."""
        log = self.log_file.absolute()
        if isinstance(projections, SQLiteProjectionStore):
            proj = projections.path.absolute()
        elif isinstance(projections, Path):
            proj = projections.absolute()
        else:
            proj = projections_path(log)
        return FileIsolation(log.parent, proj, name)

    def follow_env(self) -> dict[str, str]:
        return {"PERSISTENCE_MODULE": SQLITE_FOLLOW_MODULE, "APSW_DBNAME": str(self.log_file)}


__all__ = ["SQLiteBackend", "open_projection_file", "projections_path"]
