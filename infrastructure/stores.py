"""Open a store from its URL: `sqlite:///path/to/rota.db`, a bare path, or `postgresql://`.

`postgresql://user@host:5432/db?schema=name` opens the PostgreSQL store on that schema
(default `rota`); the `schema` parameter is stripped before connecting.
"""

from __future__ import annotations

from typing import Any

from .clock import Clock
from .errors import StoreError
from .store import EventStore


def open_store(url: str, *, clock: Clock | None = None, **settings: Any) -> EventStore:
    """Open the store a URL names. Settings are passed to the store (e.g. `synchronous`)."""
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres_store import PostgresStore, split_schema

        conninfo, schema = split_schema(url)
        return PostgresStore(conninfo, schema=schema or "rota", clock=clock, **settings)
    if "://" in url and not url.startswith("sqlite://"):
        scheme = url.split("://", 1)[0]
        raise StoreError(
            f"store URL {url!r}: unknown scheme {scheme!r}; use sqlite:///path, a file path "
            "or postgresql://",
            code="invalid_store_url",
        )
    from .sqlite_store import SQLiteStore

    return SQLiteStore(url, clock=clock, **settings)
