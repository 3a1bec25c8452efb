"""Open a store from its URL: `sqlite:///path/to/rota.db`, a bare path, or `postgresql://`.

`postgresql://user@host:5432/db?schema=name` opens the PostgreSQL store on that schema
(default `rota`); the `schema` parameter is stripped before connecting.
"""

from __future__ import annotations

import re
from typing import Any

from rota.application.errors import PortCode, StoreError
from rota.application.ports import Clock, EventStore


def open_store(url: str, *, clock: Clock | None = None, **settings: Any) -> EventStore:
    """Open the store a URL names. Settings are passed to the store (e.g. `synchronous`)."""
    if url.startswith(("postgresql://", "postgres://")):
        from rota.infrastructure.postgres.names import split_schema
        from rota.infrastructure.postgres.store import PostgresStore

        conninfo, schema = split_schema(url)
        return PostgresStore(conninfo, schema=schema or "rota", clock=clock, **settings)
    if "://" in url and not url.startswith("sqlite://"):
        scheme = url.split("://", 1)[0]
        raise StoreError(
            f"store URL {redact_url(url)!r}: unknown scheme {scheme!r}; use sqlite:///path, "
            "a file path or postgresql://",
            code=PortCode.INVALID_STORE_URL,
        )
    from rota.infrastructure.sqlite.store import SQLiteStore

    return SQLiteStore(url, clock=clock, **settings)


def redact_url(url: str) -> str:
    """The URL as it may be shown (errors, logs, output): any password replaced by `***`.

    A store URL may carry credentials (`postgresql://user:password@host/db`, or
    `?password=...`); only the process that connects needs them. Everything else is kept
    exactly as written.
    """
    shown = _PASSWORD_PARAM.sub(r"\1***", url)
    scheme, sep, rest = shown.partition("://")
    if not sep:
        return shown
    authority, tail = re.match(r"([^/?#]*)(.*)", rest, re.DOTALL).groups()  # type: ignore[union-attr]
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{host}"
    return f"{scheme}://{authority}{tail}"


_PASSWORD_PARAM = re.compile(r"([?&](?:password|sslpassword)=)[^&#]*", re.IGNORECASE)
