"""Open the projection store of a log: the one rule every caller shares.

- `--projections FILE` (or `projections=` in Python) names an SQLite projection file and
  wins over everything (a `postgresql://...?schema=` URL there names a PostgreSQL schema);
- an SQLite log keeps its projections in the file beside it, `<log>.projections`;
- a PostgreSQL log keeps them in its own schema (`postgres.projection_store`).

`rota.open`, `rota replay verify|rebuild`, `rota explain`, `rota doctor` and
`rota recover-corrupt` all open their projection store here, so a PostgreSQL deployment
needs no `--projections` anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, EventStore
from rota.domain.errors import RotaError
from rota.infrastructure.projection_tables import default_path
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.store_url import is_postgres_url
from rota.infrastructure.stored_projections import StoredProjections
from rota.infrastructure.stores import require_postgres_extra

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(target: str | os.PathLike[str] | EventStore) -> bool:
    """Whether a store (or its URL) is PostgreSQL."""
    url = getattr(target, "url", "") if isinstance(target, EventStore) else os.fspath(target)
    return isinstance(url, str) and is_postgres_url(url)


def missing(where: str) -> ProjectionStoreError:
    return ProjectionStoreError(
        f"no projection store in {where} ('rota replay rebuild' creates one)",
        code=PortCode.NO_PROJECTION_STORE,
    )


def open_projection_store(
    log: EventStore,
    projections: str | os.PathLike[str] | None = None,
    *,
    must_exist: bool = False,
    read_only: bool = False,
    clock: Clock | None = None,
) -> StoredProjections | None:
    """The projection store of `log` (see the module docstring); None for a log that has
    no place for one (a store that is neither a file nor PostgreSQL).

    `must_exist`: raise `no_projection_store` rather than create an empty one (what
    verify needs); `read_only`: a PostgreSQL session that cannot write (doctor). An
    SQLite file opened here is always writable: open it read-only with `replay.doctor`.
    """
    if projections is not None and not is_postgres(projections):
        return _file(Path(projections), must_exist, clock)
    if projections is not None or is_postgres(log):
        url = os.fspath(projections) if projections is not None else str(getattr(log, "url", ""))
        require_postgres_extra()
        from rota.infrastructure.postgres.projection_store import PostgresProjectionStore

        store = PostgresProjectionStore(
            url, clock=clock, create=not must_exist and not read_only, read_only=read_only
        )
        if must_exist and not store.exists():
            store.close()
            raise missing(store.where)
        return store
    path = default_path(log)
    return None if path is None else _file(path, must_exist, clock)


def _file(path: Path, must_exist: bool, clock: Clock | None) -> SQLiteProjectionStore:
    if must_exist and not path.exists():
        raise missing(str(path))
    return SQLiteProjectionStore(path, clock=clock)


def projection_store_exists(log: EventStore, projections: str | os.PathLike[str] | None) -> bool:
    """Whether `log` has a projection store already (nothing is created to find out)."""
    try:
        found = open_projection_store(log, projections, must_exist=True, read_only=True)
    except RotaError as exc:
        if exc.code == PortCode.NO_PROJECTION_STORE:
            return False
        raise
    if found is not None:
        found.close()
    return found is not None


__all__ = ["is_postgres", "open_projection_store", "projection_store_exists"]
