"""The PostgreSQL backend: the log and its projections in one schema of one database.

What `store_url.backend` gives for `postgresql://user@host:5432/db?schema=name` (or
`postgres://`; the `schema` parameter picks the schema, default `rota`, and is stripped
before connecting). See `rota.infrastructure.backend`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, EventStore
from rota.infrastructure.backend import Backend, Isolation, StoreLock
from rota.infrastructure.postgres.names import split_schema
from rota.infrastructure.postgres.projection_store import PostgresProjectionStore
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.stored_projections import StoredProjections

POSTGRES_FOLLOW_MODULE = "rota.infrastructure.eventsourcing.postgres"


class PostgresBackend(Backend):
    """A PostgreSQL store, the schema `url` names (see the module docstring)."""

    settings = frozenset({"synchronous", "reply_timeout"})

    def __init__(self, url: str) -> None:
        self.url = url

    def open_log(
        self, *, clock: Clock | None = None, create: bool = True, **settings: Any
    ) -> EventStore:
        conninfo, schema = split_schema(self.url)
        return PostgresStore(
            conninfo, schema=schema or "rota", clock=clock, create=create, **settings
        )

    def open_projections(
        self, *, must_exist: bool = False, read_only: bool = False, clock: Clock | None = None
    ) -> PostgresProjectionStore:
        """The projection tables in the URL's schema; `read_only`: a session that cannot
        write (doctor, verify)."""
        return _tables(self.url, must_exist, read_only, clock)

    def projections_beside(
        self,
        log: EventStore,
        *,
        must_exist: bool = False,
        read_only: bool = False,
        clock: Clock | None = None,
    ) -> PostgresProjectionStore:
        """The projection tables in the log's own schema (`log.url` names it)."""
        return _tables(log.url, must_exist, read_only, clock)

    def daemon_lock(self, *, exclusive: bool = False) -> StoreLock | None:
        """None: daemons on PostgreSQL are fenced by their leases, and recover-corrupt by
        the projections' writer lock (an advisory lock)."""
        return None

    # check_integrity: not applicable (the server checks its own pages; the hash chain,
    # checked apart, reads every event): the base class's answer.

    def isolate_projections(
        self, projections: Path | StoredProjections | None, name: str
    ) -> Isolation:
        """The projection rows of the schema's tables (`projections`, the store
        `projections_beside` opened), to move into `rota_projection_recovery` in one
        transaction (`postgres.projection_recovery`)."""
        from rota.infrastructure.postgres.projection_recovery import RowIsolation

        if not isinstance(projections, PostgresProjectionStore):
            return super().isolate_projections(projections, name)
        return RowIsolation(projections, name)

    def follow_env(self) -> dict[str, str]:
        return {"PERSISTENCE_MODULE": POSTGRES_FOLLOW_MODULE, "POSTGRES_URL": self.url}


def _tables(
    url: str, must_exist: bool, read_only: bool, clock: Clock | None
) -> PostgresProjectionStore:
    store = PostgresProjectionStore(
        url, clock=clock, create=not must_exist and not read_only, read_only=read_only
    )
    if must_exist and not store.exists():
        store.close()
        raise ProjectionStoreError(
            f"no projection store in {store.where} ('rota replay rebuild' creates one)",
            code=PortCode.NO_PROJECTION_STORE,
        )
    return store


__all__ = ["PostgresBackend"]
