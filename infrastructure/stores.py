"""Open a store from its URL: `sqlite:///path/to/rota.db`, a bare path, or `postgresql://`."""

from __future__ import annotations

from typing import Any

from .clock import Clock
from .errors import StoreError
from .store import EventStore


def open_store(url: str, *, clock: Clock | None = None, **settings: Any) -> EventStore:
    """Open the store a URL names. Settings are passed to the store (e.g. `synchronous`)."""
    if url.startswith(("postgresql://", "postgres://")):
        raise StoreError(
            f"store URL {url!r}: the PostgreSQL store is not available in this version of rota",
            code="unsupported_store",
        )
    if "://" in url and not url.startswith("sqlite://"):
        scheme = url.split("://", 1)[0]
        raise StoreError(
            f"store URL {url!r}: unknown scheme {scheme!r}; use sqlite:///path or a file path",
            code="invalid_store_url",
        )
    from .sqlite_store import SQLiteStore

    return SQLiteStore(url, clock=clock, **settings)
