"""The store contract suite runs unchanged against every store.

`open_store()` opens a handle on the store under test; calling it again opens another,
independent handle on the same log (another connection, as another process would).
`store_url` is what a child process passes to `rota.infrastructure.stores.open_store`.

The in-memory store (`memory://NAME`, a fresh name per test) is held to the same suite; the
tests that need a second PROCESS on the log skip on it (`PROCESS_TESTS`: another process
cannot open a store kept in this one's memory), and nothing else does.

PostgreSQL runs each test in its own schema (dropped afterwards). It judges time by the
database's clock, so the two tests that pin recorded times to a `ManualClock` are SQLite-only;
`test_postgres_only.py` checks the database-clock equivalents. `store_clock` gives a test the
store's own clock to set and step back on both stores: a `ManualClock` for SQLite, the
database's clock for PostgreSQL (`postgres.DatabaseClock`), a `ManualClock` for memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pytest
from postgres import DatabaseClock, schema_url, temporary_schema

from rota.application.ports import EventStore
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.memory.backend import forget
from rota.infrastructure.memory.log import MemoryStore
from rota.infrastructure.postgres.store import PostgresStore, split_schema
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store as open_url

OpenStore = Callable[..., EventStore]

MANUAL_CLOCK_TESTS = {
    "test_recorded_time_comes_from_the_store_clock",
    "test_round_trip_keeps_every_field",
}
# Tests that open the log from a second process (a child that opens `store_url`).
PROCESS_TESTS = {
    "test_same_delivery_identity_from_threads_and_processes_records_one_row",
    "test_concurrent_writers_keep_positions_gapless",
    "test_subscription_sees_a_commit_made_by_another_process",
}
STORE_KINDS = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _database_clock(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    kind = callspec.params.get("store_kind") if callspec is not None else None
    if kind == "postgresql" and request.node.originalname in MANUAL_CLOCK_TESTS:
        pytest.skip("postgresql judges time by the database clock (see test_postgres_only.py)")
    if kind == "memory" and request.node.originalname in PROCESS_TESTS:
        pytest.skip("memory: another process cannot open a store kept in this one's memory")


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path) -> Iterator[str]:
    if store_kind == "memory":
        name = f"contract-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        forget(name)
        return
    if store_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'log.db'}"
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
        elif store_url.startswith("memory://"):
            store = open_url(store_url, clock=clock)
            assert isinstance(store, MemoryStore)
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


class StoreClock(Protocol):
    """The clock a store judges time by, set by the test."""

    def now(self) -> datetime: ...

    def set(self, when: datetime) -> None: ...


CLOCK_START = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.fixture
def store_clock(
    store_kind: str, store_url: str
) -> Iterator[tuple[Callable[[], EventStore], StoreClock]]:
    """A factory of handles on the store under test, and the clock they all judge time by
    (at `CLOCK_START`), which the test sets and steps back.

    PostgreSQL's is the database's clock (a handle's `now()` asks it every time:
    `clock_refresh=0`, so no sample is advanced by the local clock between two reads).
    """
    opened: list[EventStore] = []
    clock: StoreClock
    if store_kind in ("sqlite", "memory"):
        clock = manual = ManualClock(CLOCK_START)

        def factory() -> EventStore:
            opened.append(open_url(store_url, clock=manual))
            return opened[-1]
    else:
        _, schema = split_schema(store_url)
        assert schema is not None
        clock = database = DatabaseClock(schema, CLOCK_START)

        def factory() -> EventStore:
            opened.append(PostgresStore(database.url, clock_refresh=0))
            return opened[-1]

    yield factory, clock
    for store in opened:
        store.close()
