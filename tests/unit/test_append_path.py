"""The SQLite append path's own shortcuts, against what they stand for: the chain link of one
event (`link_event`) against the canonical envelope's, an append's rows chained in one loop
(`chain_values`) against one link at a time, multi-row INSERTs against one row
each (the chain verifies, versions and positions follow on), and `CancelEvent` against the
`threading.Event` it is."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rota.application.ports import LaunchContext, NewEvent
from rota.application.ports.cancel_event import CancelEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.chain import GENESIS, canonical_envelope, link, link_event
from rota.infrastructure.log_rows import Row, chain_values, payload_of
from rota.infrastructure.sqlite.appends import INSERT_ROWS
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.audit import verify_chain


@pytest.mark.parametrize("delivery_id", [None, "input/a/k"])
@pytest.mark.parametrize("data", ['{"type":"x","v":"é"}', b'{"type":"x"}'])
def test_link_event_is_the_link_of_the_canonical_envelope(
    delivery_id: str | None, data: str | bytes
) -> None:
    key = (7, "work/a", 3, "core.work.submitted", 1, delivery_id, "2026-12-02T00:00:00.000000Z")
    payload = data.encode() if isinstance(data, str) else data
    previous = link(GENESIS, b"anything")
    assert link_event(previous, *key, payload) == link(previous, canonical_envelope(*key, data))


def test_chain_values_are_the_rows_chained_one_link_at_a_time() -> None:
    rows = [
        Row("work/a", 1, "core.work.submitted", 1, None, '{"type":"x","v":"é"}'),
        Row("work/a", 2, "core.input.accepted", 1, "input/a/k", b'{"type":"y"}'),
        Row("work/b", 1, "core.work.submitted", 1, None, '{"type":"z"}', b'{"type":"z"}'),
    ]
    at, previous = "2026-12-06T00:00:00.000000Z", link(GENESIS, b"head")
    values, last = chain_values(rows, 41, previous, at)
    expected: list[object] = []
    digest = previous
    for position, row in enumerate(rows, 42):
        assert row.version is not None
        key = (position, row.stream, row.version, row.type, row.type_version, row.delivery_id)
        digest = link_event(digest, *key, at, payload_of(row))
        expected.extend((*key, row.data, at, digest.hex()))
    assert values == expected and last.hex() == expected[-1]
    data = rows[0].data
    first = link(
        previous, canonical_envelope(42, "work/a", 1, "core.work.submitted", 1, None, at, data)
    )
    assert values[8] == first.hex()


@pytest.mark.parametrize("count", [1, INSERT_ROWS - 1, INSERT_ROWS, 2 * INSERT_ROWS + 5])
def test_an_append_of_any_size_is_chained_and_positioned_as_one_row_at_a_time(
    tmp_path: Path, count: int
) -> None:
    with SQLiteStore(tmp_path / "log.db") as store:
        store.append([NewEvent("work/z", WorkSubmitted(work_id="z", scope="root", binding="b"))])
        events = [
            NewEvent("work/a", InputAccepted(work_id="a", key=f"k{n}"), f"input/a/k{n}")
            for n in range(count)
        ]
        result = store.append(events, expected={"work/a": 0})
        assert result.written == count
        assert [r.position for r in result.recorded] == list(range(2, count + 2))
        assert [r.version for r in result.recorded] == list(range(1, count + 1))
        assert [r.event for r in result.recorded] == [e.event for e in events]
        assert store.read(1, count + 5) == result.recorded
        report = verify_chain(store)
        assert report.ok and report.checked == count + 1
        # The writer's cached head and versions are what the next append builds on.
        more = store.append([NewEvent("work/a", InputAccepted(work_id="a", key="last"))])
        assert (more.recorded[0].position, more.recorded[0].version) == (count + 2, count + 1)
        assert verify_chain(store).ok


def test_a_cancel_event_is_a_threading_event() -> None:
    event = CancelEvent()
    assert isinstance(event, threading.Event)
    assert not event.is_set() and not event.wait(0)
    event.set()
    assert event.is_set() and event.wait(0) and event.wait()
    event.clear()
    assert not event.is_set() and not event.wait(0.001)
    assert "unset" in repr(event)


def test_a_cancel_event_wakes_a_waiter_on_another_thread() -> None:
    event, woke = CancelEvent(), threading.Event()
    waiting = threading.Event()

    def wait() -> None:
        waiting.set()
        if event.wait(30):
            woke.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert waiting.wait(5)
    event.set()
    waiter.join(30)
    assert woke.is_set()


def test_a_launch_context_cancel_is_a_cancel_event_of_its_own() -> None:
    def context() -> LaunchContext:
        return LaunchContext(
            work_id="w", attempt=1, epoch=1, inputs=[], input_positions=[], config={},
            deadline=datetime.now(UTC),
        )  # fmt: skip

    first, second = context(), context()
    assert isinstance(first.cancel, CancelEvent) and first.cancel is not second.cancel
