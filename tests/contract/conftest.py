"""The store contract suite runs unchanged against every store.

`open_store()` opens a handle on the store under test; calling it again opens another,
independent handle on the same log (another connection, as another process would).
`store_url` is what a child process passes to `rota.infrastructure.stores.open_store`.

PostgreSQL runs each test in its own schema (dropped afterwards). It judges time by the
database's clock, so the two tests that pin recorded times to a `ManualClock` are SQLite-only;
`test_postgres_only.py` checks the database-clock equivalents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from postgres import schema_url, temporary_schema

from rota.application.ports import EventStore
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store as open_url

OpenStore = Callable[..., EventStore]

MANUAL_CLOCK_TESTS = {
    "test_recorded_time_comes_from_the_store_clock",
    "test_round_trip_keeps_every_field",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _database_clock(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    kind = callspec.params.get("store_kind") if callspec is not None else None
    if kind == "postgresql" and request.node.originalname in MANUAL_CLOCK_TESTS:
        pytest.skip("postgresql judges time by the database clock (see test_postgres_only.py)")


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path) -> Iterator[str]:
    if store_kind == "sqlite":
        yield f"sqlite://{tmp_path / 'log.db'}"
        return
    with temporary_schema() as schema:
        yield schema_url(schema)


@pytest.fixture
def open_store(store_url: str) -> Iterator[OpenStore]:
    opened: list[EventStore] = []

    def factory(clock: ManualClock | None = None) -> EventStore:
        store: EventStore
        if store_url.startswith("sqlite://"):
            store = SQLiteStore(store_url, clock=clock)
        else:
            store = open_url(store_url, clock=clock)
            assert isinstance(store, PostgresStore)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> EventStore:
    return open_store()
