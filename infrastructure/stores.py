"""Open a store from its URL (`store_url.backend`, the one parser): `sqlite:///relative/path`,
`sqlite:////absolute/path`, a bare path, `postgresql://` or `memory://`.

`postgresql://user@host:5432/db?schema=name` opens the PostgreSQL store on that schema
(default `rota`); the `schema` parameter is stripped before connecting. `memory://name` is
the in-memory store of that name in this process; `memory://` a fresh private one.

`create`: whether a missing store is created (what the commands that write do: submit, run,
import). Without it a missing file or schema is `store_not_found`; a file that is another
program's database is refused either way (`not_a_rota_store`).
"""

from __future__ import annotations

from typing import Any

from rota.application.ports import Clock, EventStore
from rota.infrastructure.store_url import backend, redact_url, require_postgres_extra


def open_store(
    url: str, *, clock: Clock | None = None, create: bool = True, **settings: Any
) -> EventStore:
    """Open the store a URL names. Settings are passed to the store (e.g. `synchronous`)."""
    return backend(url).open_log(clock=clock, create=create, **settings)


__all__ = ["open_store", "redact_url", "require_postgres_extra"]
