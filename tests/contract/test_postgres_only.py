"""PostgreSQL-only store guarantees: commit order for tailing readers, the database clock,
retries (lost acknowledgements, serialization failures, deadlocks, dropped connections) and
lock timeouts. Every test runs in its own schema, dropped afterwards.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from postgres import POSTGRES_URL, admin_execute, schema_url, temporary_schema

from rota.application.errors import (
    ConcurrencyConflict,
    StoreClosed,
    StoreError,
    StoreUnavailable,
)
from rota.application.ports import NewEvent
from rota.domain.events import WorkSubmitted
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.stores import open_store
from rota.replay.audit import verify_chain

from .helpers import accepted, submitted

pytestmark = pytest.mark.postgres
StoreFactory = Callable[..., PostgresStore]


@pytest.fixture
def pg_schema() -> Iterator[str]:
    with temporary_schema() as schema:
        yield schema


@pytest.fixture
def make_store(pg_schema: str) -> Iterator[StoreFactory]:
    opened: list[PostgresStore] = []

    def factory(**settings: Any) -> PostgresStore:
        store = PostgresStore(POSTGRES_URL, schema=pg_schema, **settings)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def _until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)  # polling a condition with a bounded deadline


def _backends(schema: str, condition: str) -> int:
    rows = admin_execute(
        f"SELECT count(*) FROM pg_stat_activity WHERE {condition} AND query LIKE %s",
        (f'%"{schema}".%',),
    )
    return int(rows[0][0])  # type: ignore[call-overload]


def _fault_trigger(schema: str, action: str) -> None:
    """Make the first insert into the log run `action` (plpgsql) inside the append."""
    admin_execute(
        f'CREATE SEQUENCE "{schema}".faults; '
        f'CREATE FUNCTION "{schema}".fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        f"IF nextval('\"{schema}\".faults') = 1 THEN {action} END IF; RETURN NEW; END $$; "
        f'CREATE TRIGGER fault BEFORE INSERT ON "{schema}".events '
        f'FOR EACH ROW EXECUTE FUNCTION "{schema}".fault()'
    )


def test_a_tailing_reader_never_skips_an_event_committed_late(
    make_store: StoreFactory, pg_schema: str
) -> None:
    writer, reader = make_store(), make_store()
    writer.append([submitted(f"seed{i}") for i in range(3)])
    s = pg_schema
    admin_execute(  # the append to work/slow stays open (pg_sleep) until the gate opens
        f'CREATE TABLE "{s}".gate (open BOOLEAN NOT NULL); INSERT INTO "{s}".gate VALUES (FALSE); '
        f'CREATE FUNCTION "{s}".slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
        f"IF NEW.stream = 'work/slow' THEN FOR i IN 1..2000 LOOP "
        f'EXIT WHEN (SELECT open FROM "{s}".gate); PERFORM pg_sleep(0.005); END LOOP; END IF; '
        f'RETURN NEW; END $$; CREATE TRIGGER slow BEFORE INSERT ON "{s}".events '
        f'FOR EACH ROW EXECUTE FUNCTION "{s}".slow()'
    )
    seen: list[int] = []
    reads = [0]
    stop = threading.Event()

    def tail() -> None:
        last = 0
        while True:
            stopping = stop.is_set()
            batch = reader.read(after=last)
            reads[0] += 1
            seen.extend(e.position for e in batch)
            last = seen[-1] if seen else 0
            if stopping and not batch:
                return

    slow_result: list[int] = []
    slow = threading.Thread(
        target=lambda: slow_result.extend(
            e.position for e in writer.append([submitted("slow")]).recorded
        )
    )
    later_positions: list[int] = []

    def later(n: int) -> None:
        for i in range(3):
            later_positions.extend(
                e.position for e in writer.append([submitted(f"l{n}-{i}")]).recorded
            )

    tailer = threading.Thread(target=tail)
    writers = [threading.Thread(target=later, args=(n,)) for n in range(3)]
    tailer.start()
    try:
        slow.start()
        _until(lambda: _backends(s, "wait_event = 'PgSleep'") == 1, "the slow append to hold")
        for thread in writers:
            thread.start()
        _until(  # the later appends queue behind it (or, in a store without that lock, finish)
            lambda: _backends(s, "wait_event_type = 'Lock'") == 3 or len(later_positions) == 9,
            "later appends to queue or finish",
        )
        reads_while_held = reads[0]
        _until(lambda: reads[0] >= reads_while_held + 5, "the reader to poll while held")
        seen_while_held = list(seen)
    finally:
        admin_execute(f'UPDATE "{s}".gate SET open = TRUE')
        for thread in [slow, *writers]:
            if thread.ident is not None:
                thread.join(timeout=30)
        stop.set()
        tailer.join(timeout=30)
    assert seen_while_held == [1, 2, 3]
    assert slow_result == [4]
    assert sorted(later_positions) == list(range(5, 14))
    assert seen == list(range(1, 14))
    assert verify_chain(reader).ok


def test_time_comes_from_the_database_clock(make_store: StoreFactory) -> None:
    early = make_store(clock=ManualClock(datetime(2030, 1, 1, tzinfo=UTC)))
    late = make_store(clock=ManualClock(datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)))
    host = make_store()
    database = admin_execute("SELECT now()")[0][0]
    assert isinstance(database, datetime)
    times = [early.now(), late.now(), host.now(), database, datetime.now(UTC)]
    assert max(times) - min(times) < timedelta(seconds=1)
    assert all(t.tzinfo is not None and t.utcoffset() == timedelta(0) for t in times[:3])
    before = early.now()
    early.append([submitted("a")])
    late.append([submitted("b")])
    # The database's own clock after both writes: a store's `now()` may lag it by a reply's
    # trip (its sample is dated at receipt), so it cannot bound what the writes recorded.
    after = admin_execute("SELECT clock_timestamp()")[0][0]
    recorded = [e.recorded_time for e in host.read()]
    assert before <= recorded[0] <= recorded[1] <= after


def test_round_trip_keeps_every_field_with_database_time(make_store: StoreFactory) -> None:
    store = make_store(clock=ManualClock(datetime(2026, 3, 4, tzinfo=UTC)))
    before = store.now()
    result = store.append([submitted("a"), accepted("a", 1, {"n": [1, 2.5, "x"]}, "input/a/1")])
    events = store.read()
    assert result.written == 2 and result.recorded == events
    assert [(e.position, e.stream, e.version) for e in events] == [
        (1, "work/a", 1),
        (2, "work/a", 2),
    ]
    assert events[0].event == WorkSubmitted(work_id="a", scope="root", binding="b")
    assert events[1].delivery_id == "input/a/1" and events[1].type == "core.input.accepted"
    assert events[0].recorded_at == events[1].recorded_at
    assert before <= events[0].recorded_time <= store.now()
    assert events[0].recorded_at.endswith("Z") and len(events[0].recorded_at) == 27


def _lose_first_ack(store: PostgresStore) -> None:
    def fault(conn: psycopg.Connection[Any]) -> None:
        store._fault_after_commit = None
        raise psycopg.OperationalError("simulated: connection lost while COMMIT was acknowledged")

    store._fault_after_commit = fault


def test_a_lost_commit_acknowledgement_resolves_to_one_event(
    make_store: StoreFactory, pg_schema: str
) -> None:
    store = make_store()
    store.append([submitted("a")])
    _lose_first_ack(store)
    event = accepted("a", 1, {"v": 1}, "input/a/1")
    result = store.append([event], expected={"work/a": 1})
    assert result.written == 0 and result.duplicate
    assert result.recorded == [store.find_delivery("input/a/1")]
    assert store.metrics["retries"] == 1
    rows = admin_execute(
        f"SELECT count(*) FROM \"{pg_schema}\".events WHERE delivery_id = 'input/a/1'"
    )
    assert rows[0][0] == 1 and store.head().position == 2
    # Without a delivery identity only the expected version stops the duplicate:
    _lose_first_ack(store)
    with pytest.raises(ConcurrencyConflict):
        store.append([accepted("a", 2)], expected={"work/a": 2})
    # (each lost connection also replaced the pool: its siblings reached the same server)
    assert store.metrics == {
        "retries": 2, "conflicts": 1, "delivery_conflicts": 0, "reconnects": 2
    }  # fmt: skip
    assert store.stream_version("work/a") == 3 and verify_chain(store).ok


@pytest.mark.parametrize(
    "action",
    [
        "RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure';",
        "RAISE EXCEPTION 'injected' USING ERRCODE = 'deadlock_detected';",
        "PERFORM pg_terminate_backend(pg_backend_pid());",
    ],
    ids=["serialization_failure", "deadlock", "dropped_connection"],
)
def test_a_transient_failure_is_retried_and_counted(
    make_store: StoreFactory, pg_schema: str, action: str
) -> None:
    store = make_store()
    _fault_trigger(pg_schema, action)
    result = store.append([submitted("a"), accepted("a", 1)])
    assert result.written == 2
    assert [e.position for e in result.recorded] == [1, 2]
    assert store.metrics["retries"] == 1
    assert [e.position for e in store.read()] == [1, 2] and verify_chain(store).ok


def test_a_held_lock_surfaces_as_store_unavailable(
    make_store: StoreFactory, pg_schema: str
) -> None:
    store = make_store(lock_timeout=0.1, max_retries=1)
    with psycopg.connect(POSTGRES_URL) as holder:
        holder.execute(f'SELECT * FROM "{pg_schema}".head FOR UPDATE')
        with pytest.raises(StoreUnavailable, match=r"lock_timeout=0\.1s on 2 attempts.*stuck"):
            store.append([submitted("a")])
        assert store.read() == [] and store.metrics["retries"] == 1
        holder.rollback()
    assert store.append([submitted("a")]).written == 1


def test_a_writer_paused_mid_transaction_loses_the_lock(make_store: StoreFactory) -> None:
    paused = make_store(lock_timeout=0.1)  # so idle_in_transaction_session_timeout is 1 s
    other = make_store(lock_timeout=0.5)
    holding, resume = threading.Event(), threading.Event()

    def body(tx: Any) -> int:
        holding.set()
        resume.wait(10.0)  # the process stops mid-transaction, holding the head lock
        return int(tx.head()[0])

    thread = threading.Thread(target=lambda: paused.write(body, lock=True))
    thread.start()
    try:
        assert holding.wait(10.0)
        assert other.append([submitted("a")]).written == 1  # the server ended the paused session
    finally:
        resume.set()
        thread.join(10.0)
    assert paused.metrics["retries"] == 1 and other.metrics["retries"] >= 1
    assert [e.position for e in other.read()] == [1]


def test_wait_for_commit_polls_when_a_notify_is_lost(
    make_store: StoreFactory, pg_schema: str
) -> None:
    store = make_store(poll_interval=0.05)
    assert store.wait_for_commit(0, 0.01) is False
    assert store._listening.is_set()
    admin_execute(  # a commit that sends no NOTIFY
        f'INSERT INTO "{pg_schema}".events VALUES '
        "(1, 's', 1, 't', 1, NULL, '{}', NULL, 'x', 'y')"
    )
    started = time.monotonic()
    assert store.wait_for_commit(0, 10.0) is True
    assert time.monotonic() - started < 5.0


def test_a_proven_listener_lets_a_quiet_read_say_nothing_after(make_store: StoreFactory) -> None:
    store, other = make_store(), make_store()
    other.append([submitted("a")])
    assert store.read(1) == []
    assert store.nothing_after(1) is False  # no listener yet: the store cannot know
    assert store.wait_for_commit(1, 0.01) is False  # starts the listener, which probes
    _until(store._proven.is_set, "the listener's own probe")
    assert [e.position for e in store.read(0)] == [1]
    assert store.nothing_after(1) is False  # that read found events: it says nothing more
    assert store.read(1) == []
    assert store.nothing_after(1) is True
    assert store.nothing_after(0) is False
    generation = store._generation
    other.append([submitted("b")])  # another handle: only its NOTIFY tells this one
    _until(lambda: store._generation != generation, "the other handle's NOTIFY")
    assert store.nothing_after(1) is False
    assert [e.position for e in store.read(1)] == [2]


def test_a_listener_that_never_receives_is_not_trusted_and_waiters_poll_each_second(
    make_store: StoreFactory, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As behind a transaction-pooling PgBouncer: LISTEN succeeds, no notification arrives.
    store = make_store(poll_interval=30.0)
    query = store._query
    monkeypatch.setattr(
        store, "_query", lambda sql, params=(): [] if "pg_notify" in sql else query(sql, params)
    )
    assert store.wait_for_commit(0, 0.01) is False
    assert store._listening.is_set() and not store._proven.is_set()
    assert store.read(0) == []
    assert store.nothing_after(0) is False
    admin_execute(  # a commit that sends no NOTIFY
        f'INSERT INTO "{pg_schema}".events VALUES '
        "(1, 's', 1, 't', 1, NULL, '{}', NULL, 'x', 'y')"
    )
    started = time.monotonic()
    assert store.wait_for_commit(0, 20.0) is True  # the 1 s poll, not the 30 s one
    assert time.monotonic() - started < 10.0


def test_wait_for_commit_is_woken_by_another_handle(make_store: StoreFactory) -> None:
    waiter, writer = make_store(poll_interval=30.0), make_store()
    woke = threading.Event()
    thread = threading.Thread(target=lambda: waiter.wait_for_commit(0, 20.0) and woke.set())
    thread.start()
    _until(waiter._listening.is_set, "the listener")
    writer.append([submitted("a")])
    assert woke.wait(10.0)
    thread.join()


def test_eventsourcing_rows_chain_their_stored_bytes_and_survive_lost_acks(
    pg_schema: str,
) -> None:
    from eventsourcing.persistence import StoredEvent, Tracking

    from rota.infrastructure.eventsourcing.postgres import PgDatastore, PgProcessRecorder

    datastore = PgDatastore(POSTGRES_URL, pg_schema)
    try:
        recorder = PgProcessRecorder(datastore)
        store = datastore.store
        store.append([submitted("a")])
        state = b"\x00\xff not utf-8"
        first = StoredEvent(uuid.uuid4(), 1, "t", state)
        second = StoredEvent(first.originator_id, 2, "t", b"two")
        _lose_first_ack(store)  # a retry must not turn the caller's own write into IntegrityError
        assert recorder.insert_events([first]) == [2]
        _lose_first_ack(store)
        assert recorder.insert_events([second], tracking=Tracking("up", 7)) == [3]
        _lose_first_ack(store)
        recorder.insert_tracking(Tracking("up", 8))
        assert store.metrics["retries"] == 3
        assert recorder.max_tracking_id("up") == 8
        assert recorder.select_events(first.originator_id) == [first, second]
        raw = store.read_raw()
        assert raw[1].data == state and isinstance(raw[0].data, str) and len(raw) == 3
        assert verify_chain(store).ok
    finally:
        datastore.close()


def test_open_store_dispatches_urls_and_refuses_use_after_close(pg_schema: str) -> None:
    store = open_store(schema_url(pg_schema))
    assert isinstance(store, PostgresStore) and store.schema == pg_schema
    store.append([NewEvent("s", WorkSubmitted(work_id="w", scope="r", binding="b"))])
    store_id = store.store_id
    store.close()
    store.close()
    with pytest.raises(StoreClosed):
        store.read()
    again = open_store(store.url, clock=ManualClock(), synchronous="full")  # as the scheduler does
    assert again.head().position == 1 and again.store_id == store_id
    again.close()
    relaxed = PostgresStore(schema_url(pg_schema), synchronous="normal")
    assert relaxed._query("SHOW synchronous_commit") == [("off",)]
    relaxed.close()
    with pytest.raises(StoreError, match="not allowed"):
        PostgresStore(POSTGRES_URL, schema='x"; DROP TABLE y; --')
