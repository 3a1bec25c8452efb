"""Open a store from its URL (`store_url.parse`, the one parser): `sqlite:///relative/path`,
`sqlite:////absolute/path`, a bare path, or `postgresql://`.

`postgresql://user@host:5432/db?schema=name` opens the PostgreSQL store on that schema
(default `rota`); the `schema` parameter is stripped before connecting.

`create`: whether a missing store is created (what the commands that write do: submit, run,
import). Without it a missing file or schema is `store_not_found`; a file that is another
program's database is refused either way (`not_a_rota_store`).
"""

from __future__ import annotations

from typing import Any

from rota.application.errors import PortCode, StoreError
from rota.application.ports import Clock, EventStore
from rota.infrastructure.store_url import PostgresURL, parse, redact_url


def open_store(
    url: str, *, clock: Clock | None = None, create: bool = True, **settings: Any
) -> EventStore:
    """Open the store a URL names. Settings are passed to the store (e.g. `synchronous`)."""
    parsed = parse(url)
    if isinstance(parsed, PostgresURL):
        require_postgres_extra()
        from rota.infrastructure.postgres.names import split_schema
        from rota.infrastructure.postgres.store import PostgresStore

        conninfo, schema = split_schema(url)
        return PostgresStore(
            conninfo, schema=schema or "rota", clock=clock, create=create, **settings
        )
    from rota.infrastructure.sqlite.store import SQLiteStore

    return SQLiteStore(url, clock=clock, create=create, **settings)


def require_postgres_extra() -> None:
    """Refuse a postgresql:// store, with what to install, when psycopg is not installed."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise StoreError(
            "a postgresql:// store needs PostgreSQL support: install 'rota[postgresql]'",
            code=PortCode.MISSING_EXTRA,
        ) from None


__all__ = ["open_store", "redact_url", "require_postgres_extra"]
