"""`Transactions.transact` skips the catch-up read when the store says nothing was committed
after the projection (`EventStore.nothing_after`), but never after a conflict: somebody did
commit then, even if the store's wake-up (a PostgreSQL NOTIFY) has not arrived yet."""

from __future__ import annotations

import uuid

import pytest

from rota.application.ports import NewEvent
from rota.application.transactions import Transactions
from rota.domain.emit import Emit
from rota.domain.events import WorkSubmitted
from rota.infrastructure.memory.backend import forget
from rota.infrastructure.stores import open_store


def submitted(work: str) -> WorkSubmitted:
    return WorkSubmitted(work_id=work, scope="root", binding="b")


def test_after_a_conflict_it_reads_even_when_the_store_says_nothing_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"conflict-{uuid.uuid4().hex}"  # two handles on one in-memory log
    mine, other = open_store(f"memory://{name}"), open_store(f"memory://{name}")
    try:
        tx = Transactions(mine)
        tx.catch_up()
        other.append([NewEvent("work/a", submitted("a"))])  # behind tx's back
        monkeypatch.setattr(mine, "nothing_after", lambda position: True)  # a stale "quiet"
        reads: list[int] = []
        catch_up = tx.catch_up

        def counted() -> int:
            reads.append(tx.projection.position)
            return catch_up()

        monkeypatch.setattr(tx, "catch_up", counted)
        decided: list[int] = []

        def decide() -> tuple[list[Emit], dict[str, int]]:
            decided.append(tx.projection.position)
            version = 1 if tx.projection.position else 0
            return [Emit("work/a", submitted("a"))], {"work/a": version}

        tx.transact(decide)
        # First decision on the stale projection (no read), a conflict, then a read: the
        # second decision saw the other writer's event and its append went through.
        assert decided == [0, 1]
        assert reads == [0]
        assert tx.conflicts == 1
        assert [e.stream for e in mine.read(0)] == ["work/a", "work/a"]
    finally:
        mine.close()
        other.close()
        forget(name)
