"""The store contract suite runs unchanged against every store.

`open_store()` opens a handle on the store under test; calling it again opens another,
independent handle on the same log (another connection, as another process would).
`store_url` is what a child process passes to `rota.infrastructure.stores.open_store`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite_store import SQLiteStore
from rota.infrastructure.store import EventStore

OpenStore = Callable[..., EventStore]


@pytest.fixture(params=["sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'log.db'}"


@pytest.fixture
def open_store(store_url: str) -> Iterator[OpenStore]:
    opened: list[EventStore] = []

    def factory(clock: ManualClock | None = None) -> EventStore:
        store = SQLiteStore(store_url, clock=clock)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> EventStore:
    return open_store()
