"""Open the projection store of a log: the one rule every caller shares.

- `--projections URL` (or `projections=` in Python) names the projection store itself and
  wins over everything: a file path names an SQLite projection file, a
  `postgresql://...?schema=` URL a PostgreSQL schema, `memory://name` an in-memory store;
- otherwise the log's backend keeps them in its default place (`Backend.projections_beside`):
  the file `<log>.projections` beside an SQLite log, a PostgreSQL log's own schema, an
  in-memory log's own tables.

`rota.open`, `rota replay verify|rebuild`, `rota explain`, `rota doctor` and
`rota recover-corrupt` all open their projection store here, so a PostgreSQL deployment
needs no `--projections` anywhere.
"""

from __future__ import annotations

import os

from rota.application.errors import PortCode
from rota.application.ports import Clock, EventStore
from rota.domain.errors import RotaError
from rota.infrastructure.store_url import backend
from rota.infrastructure.stored_projections import StoredProjections


def open_projection_store(
    log: EventStore,
    projections: str | os.PathLike[str] | None = None,
    *,
    must_exist: bool = False,
    read_only: bool = False,
    clock: Clock | None = None,
) -> StoredProjections | None:
    """The projection store of `log` (see the module docstring); None for a log that has
    no place for one.

    `must_exist`: raise `no_projection_store` rather than create an empty one (what
    verify needs); `read_only`: a PostgreSQL session that cannot write (doctor). An
    SQLite file opened here is always writable: open it read-only with `replay.doctor`.
    """
    if projections is not None:
        named = backend(projections)
        return named.open_projections(must_exist=must_exist, read_only=read_only, clock=clock)
    return backend(log.url).projections_beside(
        log, must_exist=must_exist, read_only=read_only, clock=clock
    )


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


__all__ = ["open_projection_store", "projection_store_exists"]
