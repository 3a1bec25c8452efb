"""Schedulers on PostgreSQL: several hosts, one log, the same guarantees as on SQLite.

- the migration path: a deployment runs on SQLite, is exported, imported into PostgreSQL,
  verified, and its Work continues there (same Work ids, attempt numbers continue);
- `append_raw` (what `rota import` uses) checks every link and writes all or nothing;
- leases and retry timers are judged by the DATABASE clock: two schedulers whose own clocks
  differ by 30 s agree on when a lease expires and when a timer is due;
- three scheduler processes race on one schema while Work is submitted continuously and one
  of them is paused (SIGSTOP) for longer than its lease; the log alone then shows no double
  claim, no capacity overrun, no write accepted from a stale epoch, and no stuck Work.

Every test runs in its own schema (dropped afterwards). ROTA_RACE_SECONDS sets the race's
length (default 60 under CI=true, else 20).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from postgres import schema_url, temporary_schema
from trial_scale import seconds

import rota
from rota.application.errors import ConcurrencyConflict, StoreError
from rota.application.ports import EventStore, NewEvent, RawRecord, RecordedEvent
from rota.application.timestamps import parse_timestamp
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.domain.policy import RetryPolicy
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.executors.inproc import Fail
from rota.infrastructure.postgres.names import split_schema
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store
from rota.projections.scheduler import SchedulerProjection
from rota.replay.audit import iter_raw, verify_chain
from rota.replay.export import export_to_file, import_export

from .invariants import check_log

pytestmark = pytest.mark.postgres

CI = os.environ.get("CI", "").lower() == "true"
RACE_SECONDS = seconds(60 if CI else 20, 300, "ROTA_RACE_SECONDS")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with temporary_schema() as schema:
        yield schema_url(schema)


def _rota(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _events(store: EventStore, kind: str, work_id: str | None = None) -> list[RecordedEvent]:
    found: list[RecordedEvent] = []
    position = 0
    while batch := store.read(position, 5000):
        found.extend(
            r
            for r in batch
            if r.type == kind and (work_id is None or getattr(r.event, "work_id", None) == work_id)
        )
        position = batch[-1].position
    return found


def _poll(
    scheduler: rota.Scheduler, done: Callable[[], bool], what: str, timeout: float = 15.0
) -> None:
    """Tick `scheduler` until `done()` (bounded; between ticks wait on its wake-up event)."""
    deadline = time.monotonic() + timeout
    while True:
        scheduler.tick()
        if done():
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        scheduler.host.wake.wait(0.02)
        scheduler.host.wake.clear()


def _in_state(scheduler: rota.Scheduler, work_id: str, state: str) -> Callable[[], bool]:
    def check() -> bool:
        work = scheduler.work(work_id)
        return work is not None and work.state == state

    return check


# -- the migration path -----------------------------------------------------------------


def _echo(ctx: rota.LaunchContext) -> dict[str, Any]:
    fail = any(isinstance(i, dict) and i.get("fail") for i in ctx.inputs)
    if fail and ctx.attempt == 1:
        raise Fail("flaky", "the first attempt fails")
    return {"inputs": ctx.inputs, "attempt": ctx.attempt}


def _register(scheduler: rota.Scheduler) -> None:
    scheduler.register("echo", _echo, retry=RetryPolicy(max_attempts=3, delays=(0.2, 0.2)))


def test_a_sqlite_deployment_moves_to_postgresql_and_its_work_continues(
    tmp_path: Path, pg_url: str
) -> None:
    db = tmp_path / "rota.db"
    config = {"settings": {"concurrency": 4}}
    with rota.open(db, config=config) as before:
        _register(before)
        before.submit("once", binding="echo", input={"n": 1})
        before.submit("standing", binding="echo", kind="standing", input={"n": 1})
        before.submit("flaky", binding="echo", input={"fail": True})
        before.run_until_idle(timeout=30)
        assert before.work("once").state == "completed"
        assert before.work("standing").state == "idle"
        assert before.work("flaky").state == "retry_wait"
    with SQLiteStore(db) as source:
        source_rows = list(iter_raw(source))
        source_head = source.head()

    # The documented commands: export, verify the file, import, verify the new store.
    export = tmp_path / "rota.export.jsonl"
    done = _rota("--store", f"sqlite:///{db}", "export", "--out", str(export), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = _rota("audit", "verify", "--file", str(export), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stdout + done.stderr
    done = _rota("import", str(export), "--to", pg_url, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["head_position"], report["head_hash"]) == (
        source_head.position,
        source_head.hash,
    )
    done = _rota("--store", pg_url, "audit", "verify", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stdout + done.stderr

    # Continue on PostgreSQL with the same bindings.
    with rota.open(pg_url, config=config) as after:
        _register(after)
        assert isinstance(after.store, PostgresStore)
        imported_rows = list(iter_raw(after.store))
        assert imported_rows == source_rows  # every row as recorded, positions and hashes
        after.accept("standing", {"n": 2})
        after.submit("new", binding="echo", input={"n": 3})
        after.run_until_idle(timeout=30)
        _poll(after, _in_state(after, "flaky", "completed"), "the retry")
        works = {w.id: w for w in after.works()}
        standing = after.work("standing")
        flaky = after.work("flaky")
        chain = verify_chain(after.store)
        projection = check_log(after.store, {"agents": 4})
    assert chain.ok and chain.head_position > source_head.position
    assert {k: w.state for k, w in works.items()} == {
        "once": "completed",
        "standing": "idle",
        "flaky": "completed",
        "new": "completed",
    }
    assert standing is not None and flaky is not None
    assert [(a.number, a.outcome) for a in standing.attempts] == [
        (1, "completed"),
        (2, "completed"),
    ]
    assert standing.attempts[1].data["inputs"] == [{"n": 2}]
    assert [(a.number, a.outcome) for a in flaky.attempts] == [
        (1, "failed"),
        (2, "completed"),
    ]
    # The new events carry the database's times, after the imported ones' positions.
    assert projection.works["new"].attempts[0].number == 1
    assert projection.position == chain.head_position


def test_import_through_the_api_keeps_the_export_byte_for_byte(tmp_path: Path, pg_url: str) -> None:
    db = tmp_path / "rota.db"
    with rota.open(db, config={"settings": {"concurrency": 2}}) as scheduler:
        _register(scheduler)
        for n in range(5):
            scheduler.submit(f"w{n}", binding="echo", input={"n": n})
        scheduler.run_until_idle(timeout=30)
        export_to_file(scheduler.store, tmp_path / "a.jsonl")
    with open_store(pg_url) as store:
        report = import_export(tmp_path / "a.jsonl", store, page=7)
        export_to_file(store, tmp_path / "b.jsonl")
        again = import_export  # a second import is refused: the store is not empty
        with pytest.raises(StoreError) as refused:
            again(tmp_path / "a.jsonl", store)
        assert refused.value.code == "store_not_empty"
    assert report.ok
    ours = (tmp_path / "a.jsonl").read_bytes().splitlines()
    theirs = (tmp_path / "b.jsonl").read_bytes().splitlines()
    assert theirs[1:] == ours[1:]  # only the header's store id differs


def test_append_raw_checks_every_link_and_writes_all_or_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    with SQLiteStore(tmp_path / "source.db") as source:
        with rota.open(source.url, config={"settings": {"concurrency": 2}}) as scheduler:
            _register(scheduler)
            for n in range(3):
                scheduler.submit(f"w{n}", binding="echo", input={"n": n})
            scheduler.run_until_idle(timeout=30)
        rows = list(iter_raw(source))
    assert len(rows) > 8
    edited = msgspec.structs.replace(rows[4], data=str(rows[4].data) + " ")
    with open_store(pg_url) as store:
        assert isinstance(store, PostgresStore)
        for bad in (
            rows[1:3],  # does not start at head + 1
            [rows[0], rows[2]],  # a gap
            [*rows[:4], edited],  # edited: the first four are fine, yet none is written
            [msgspec.structs.replace(rows[0], hash="zz")],  # a hash that is not even hex
        ):
            with pytest.raises(StoreError) as refused:
                store.append_raw(bad)
            assert refused.value.code == "import_mismatch"
            assert store.head().position == 0 and store.read() == []
        store.append_raw([])  # nothing to do
        store.append_raw(rows[:5])
        assert store.wait_for_commit(4, 5.0)  # waiters are woken as by an append
        with pytest.raises(StoreError) as refused:
            store.append_raw(rows[:5])  # the same rows again: no longer the next ones
        assert refused.value.code == "import_mismatch"
        # A lost commit acknowledgement: the retry finds these very rows and does nothing.
        store._fault_after_commit = _lose_ack(store)
        store.append_raw(rows[5:8])
        assert store.metrics["retries"] == 1
        store.append_raw(rows[8:])
        assert list(iter_raw(store)) == rows
        assert verify_chain(store).head_hash == rows[-1].hash
        # The head row moved too: new appends continue the imported chain.
        with rota.open(pg_url, config={"settings": {"concurrency": 2}}) as scheduler:
            _register(scheduler)
            scheduler.submit("more", binding="echo", input={"n": 9})
            scheduler.run_until_idle(timeout=30)
            assert scheduler.work("more").state == "completed"
        report = verify_chain(store)
        assert report.ok and report.head_position > rows[-1].position


def _lose_ack(store: PostgresStore) -> Callable[[Any], None]:
    def fault(conn: Any) -> None:
        store._fault_after_commit = None
        raise psycopg.OperationalError("simulated: connection lost while COMMIT was acknowledged")

    return fault


def test_import_refuses_rows_of_another_log(tmp_path: Path, pg_url: str) -> None:
    logs: list[list[RawRecord]] = []
    for name in ("one", "two"):
        with rota.open(tmp_path / f"{name}.db", config={}) as scheduler:
            _register(scheduler)
            scheduler.submit(name, binding="echo", input={"name": name})
            scheduler.run_until_idle(timeout=30)
            logs.append(list(iter_raw(scheduler.store)))
    with open_store(pg_url) as store:
        store.append_raw(logs[0])
        with pytest.raises(StoreError) as refused:
            # positions continue, but the chain does not link to this log's head
            store.append_raw([msgspec.structs.replace(logs[1][0], position=len(logs[0]) + 1)])
        assert refused.value.code == "import_mismatch"
        assert store.head().position == len(logs[0])


# -- the store's write path ---------------------------------------------------------------


def _submitted(work: str) -> NewEvent:
    return NewEvent(f"work/{work}", WorkSubmitted(work_id=work, scope="root", binding="b"))


def _accepted(work: str, key: str, delivery: str | None) -> NewEvent:
    return NewEvent(f"work/{work}", InputAccepted(work_id=work, key=key, payload=key), delivery)


def test_appends_with_awkward_names_dedupe_and_fence(pg_url: str) -> None:
    """Stream names and delivery identities reach the server inlined in the lock's round
    trip: quotes, backslashes, JSON and non-ASCII must survive it exactly."""
    names = ["o'brien", "back\\slash", 'quote"d', "{json: [1]}", "é-ü-中", "semi;colon --"]
    with open_store(pg_url) as store:
        for name in names:
            first = store.append([_submitted(name), _accepted(name, "k", f"input/{name}/'k'")])
            assert first.written == 2
            again = store.append([_accepted(name, "k", f"input/{name}/'k'")])
            assert again.duplicate and again.recorded == [first.recorded[1]]
            with pytest.raises(ConcurrencyConflict):
                store.append([_accepted(name, "k2", None)], expected={f"work/{name}": 1})
            assert store.append([_accepted(name, "k2", None)], expected={f"work/{name}": 2})
            assert store.stream_version(f"work/{name}") == 3
        assert verify_chain(store).ok
        assert {e.stream for e in store.read()} == {f"work/{n}" for n in names}


def test_a_writer_paused_holding_the_lock_loses_it_after_earlier_appends(pg_url: str) -> None:
    """An append sends INSERT + COMMIT in one pipeline; the server must still end the
    session of a writer that pauses inside its NEXT transaction holding the lock (after a
    pipeline the server leaves idle_in_transaction_session_timeout unarmed until the next
    ordinary query: the lock's round trip must be one)."""
    paused = PostgresStore(pg_url, lock_timeout=0.1, pool_min=1, pool_max=1)  # timeout 1 s
    other = PostgresStore(pg_url, lock_timeout=0.5)
    holding, resume = threading.Event(), threading.Event()
    try:
        for n in range(3):  # the same pooled connection, pipelined commits
            paused.append([_submitted(f"before-{n}")])

        def body(tx: Any) -> None:
            holding.set()
            resume.wait(10.0)  # the writer stops mid-transaction, holding the lock

        thread = threading.Thread(target=lambda: paused.write(body, lock=True))
        thread.start()
        try:
            assert holding.wait(10.0)
            started = time.monotonic()
            assert other.append([_submitted("after")]).written == 1
            assert time.monotonic() - started < 8.0
        finally:
            resume.set()
            thread.join(10.0)
        assert paused.metrics["retries"] >= 1  # its session was ended; it began again
        assert [e.stream for e in other.read()][-2:] in (
            ["work/before-2", "work/after"],
            ["work/after", "work/before-2"],
        )
    finally:
        paused.close()
        other.close()


# -- the database clock ---------------------------------------------------------------------

SKEWED = {"settings": {"concurrency": 4, "lease_seconds": 1}}


def _skewed_pair(url: str) -> tuple[rota.Scheduler, rota.Scheduler]:
    """Two schedulers on one schema whose own clocks are 30 s apart (both ignored)."""
    real = datetime.now(UTC)
    # Owners that name no host here: recovery by the other gets no evidence ("unknown").
    a = rota.open(url, config=SKEWED, clock=ManualClock(real - timedelta(seconds=15)), owner="a")
    b = rota.open(url, config=SKEWED, clock=ManualClock(real + timedelta(seconds=15)), owner="b")
    return a, b


def test_skewed_hosts_agree_on_lease_expiry_by_the_database_clock(pg_url: str) -> None:
    release = threading.Event()

    def blocking(ctx: rota.LaunchContext) -> dict[str, str]:
        release.wait(30)  # the attempt runs on while its host stops renewing the lease
        return {}

    a, b = _skewed_pair(pg_url)
    try:
        for scheduler in (a, b):
            scheduler.register("block", blocking)
        a.submit("w", binding="block")
        a.tick()  # A claims and launches; from now on A is never ticked: it renews nothing
        (claim,) = _events(a.store, "core.execution.claimed", "w")
        lease = claim.event.lease_expires_at  # type: ignore[attr-defined]
        # Recorded and leased by the database's clock, not A's (15 s behind):
        assert abs((claim.recorded_time - b.store.now()).total_seconds()) < 5
        assert timedelta(seconds=0.5) < lease - claim.recorded_time <= timedelta(seconds=1)

        # B's clock is 15 s ahead: by it the lease expired long ago. B must wait anyway.
        ticks_before = 0
        while b.store.now() < lease - timedelta(seconds=0.15):
            b.tick()
            ticks_before += 1
            assert not _events(b.store, "core.execution.recovered", "w"), "recovered early"
            b.host.wake.wait(0.02)
        assert ticks_before > 0
        _poll(b, lambda: bool(_events(b.store, "core.execution.recovered", "w")), "recovery")
        (recovered,) = _events(b.store, "core.execution.recovered", "w")[:1]
        event: Any = recovered.event
        assert (event.owner, event.previous_owner, event.epoch) == ("b", "a", 2)
        # The decision's time (its new lease minus the lease duration) was past the old lease.
        assert event.lease_expires_at - timedelta(seconds=1) >= lease
        assert recovered.recorded_time >= lease
        assert abs((recovered.recorded_time - b.store.now()).total_seconds()) < 5
    finally:
        release.set()
        b.close()
        a.close()


def test_a_retry_timer_fires_by_the_database_clock_in_either_host(pg_url: str) -> None:
    def fail_once(ctx: rota.LaunchContext) -> dict[str, int]:
        if ctx.attempt == 1:
            raise Fail("flaky", "the first attempt fails")
        return {"attempt": ctx.attempt}

    a, b = _skewed_pair(pg_url)
    try:
        for scheduler in (a, b):
            scheduler.register(
                "flaky", fail_once, inline=True, retry=RetryPolicy(max_attempts=2, delays=(1.0,))
            )
        # One Work fails under each host; the OTHER host, alone, fires its timer.
        for work_id, fails_in, fires_in in (("x", a, b), ("y", b, a)):
            fails_in.submit(work_id, binding="flaky")
            _poll(fails_in, _in_state(fails_in, work_id, "retry_wait"), f"{work_id} to fail")
            (armed,) = _events(a.store, "core.retry.armed", work_id)
            due = armed.event.due_at  # type: ignore[attr-defined]
            assert timedelta(seconds=0.5) < due - armed.recorded_time <= timedelta(seconds=1)
            while fires_in.store.now() < due - timedelta(seconds=0.15):
                fires_in.tick()
                assert not _events(a.store, "core.retry.fired", work_id), "fired early"
                fires_in.host.wake.wait(0.02)
            # B's clock is 15 s ahead, A's 15 s behind: by A's own clock the timer would
            # be due 15 s from now. By the database's it is due at once: well within 5 s.
            _poll(fires_in, _in_state(fires_in, work_id, "completed"), "the retry", timeout=5.0)
            (fired,) = _events(a.store, "core.retry.fired", work_id)
            assert fired.recorded_time >= due
            attempts = fires_in.work(work_id).attempts
            assert [x.outcome for x in attempts] == ["failed", "completed"]
            assert attempts[1].owner == ("b" if fires_in is b else "a")
    finally:
        b.close()
        a.close()


# -- racing processes ------------------------------------------------------------------------

LEASE = 2.0
RACE_CONFIG = {
    "settings": {"concurrency": 4, "lease_seconds": LEASE},
    "scopes": [{"path": "root/team", "limits": {"concurrency": 1}}],
}
LIMITS = {"agents": 4}
SCOPE_LIMITS = {"root/team": 1}
PAUSE = 5.0  # longer than the lease

CHILD = textwrap.dedent(
    """
    import json, logging, random, signal, sys, threading
    import rota
    from rota.domain.policy import RetryPolicy
    url, config = sys.argv[1], json.loads(sys.argv[2])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    refused = []  # results this host reported after it lost the attempt (stale epoch)
    class Count(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("result of"):
                refused.append(record.getMessage())
    logging.getLogger("rota.host").addHandler(Count(logging.INFO))
    logging.getLogger("rota.host").setLevel(logging.INFO)
    def work(ctx):
        ctx.cancel.wait(random.uniform(0.01, 0.08))  # the job's own duration
        return {"pid": __import__("os").getpid()}
    # An in-process callable of a paused host cannot be proven stopped or finished, so the
    # Work is declared idempotent and a lost attempt is retried.
    retry = RetryPolicy(max_attempts=20, delays=(0.2,) * 19, retry_on_lost=True)
    with rota.open(url, config=config) as scheduler:
        scheduler.register("race", work, retry=retry)
        print(json.dumps({"owner": scheduler.service.owner}), flush=True)
        scheduler.run(stop)
        metrics = scheduler.store.metrics
        print(json.dumps({"metrics": metrics, "refused": len(refused)}), flush=True)
    """
)

# Events written on behalf of an attempt that must find it live (not ended, not parked).
LIVE_ONLY = {
    "core.execution.invoked",
    "core.execution.renewed",
    "core.execution.completed",
    "core.execution.failed",
    "core.execution.adopted",
    "core.execution.recovery_persisted",
}


def check_epochs(store: EventStore) -> Counter[str]:
    """Fold the log and assert that every event written on behalf of an attempt (one with
    `work_id`, `attempt` and `epoch`) carries that attempt's current epoch at its position:
    a claim opens attempt len+1, a recovery moves the epoch up by one from the current one,
    and everything else (invoke markers, renewals, outcomes, releases, losses ...) is
    written at the current epoch, outcomes and renewals only while the attempt is live.
    So no write from a stale epoch (a paused or partitioned host) was accepted.
    Returns how many events of each type were checked."""
    projection = SchedulerProjection()
    checked: Counter[str] = Counter()
    position = 0
    while batch := store.read(position, 5000):
        for r in batch:
            event: Any = r.event
            work_id = getattr(event, "work_id", None)
            number = getattr(event, "attempt", None)
            epoch = getattr(event, "epoch", None)
            if work_id is not None and number is not None and epoch is not None:
                work = projection.works.get(work_id)
                where = f"position {r.position}: {r.type} of {work_id}/{number} at epoch {epoch}"
                assert work is not None, f"{where}: no such Work"
                if r.type == "core.execution.claimed":
                    assert number == len(work.attempts) + 1, f"{where}: not the next attempt"
                else:
                    assert 1 <= number <= len(work.attempts), f"{where}: no such attempt"
                    attempt = work.attempts[number - 1]
                    if r.type == "core.execution.recovered":
                        assert event.previous_epoch == attempt.epoch == epoch - 1, (
                            f"{where}: recovered from epoch {event.previous_epoch}, "
                            f"current {attempt.epoch}"
                        )
                    elif r.type == "core.execution.resumed":
                        assert epoch > attempt.epoch, f"{where}: current {attempt.epoch}"
                    else:
                        assert epoch == attempt.epoch, f"{where}: current {attempt.epoch}"
                        if r.type in LIVE_ONLY:
                            assert attempt.live, f"{where}: the attempt is {attempt.status}"
                checked[r.type] += 1
            projection.apply(r.position, r.stream, r.version, parse_timestamp(r.recorded_at), event)
        position = batch[-1].position
    return checked


def _head_lock_free(url: str) -> bool:
    """Whether the log's write lock (the head row) can be taken within 300 ms."""
    conninfo, schema = split_schema(url)
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        conn.execute("SET lock_timeout = '300ms'")
        try:
            conn.execute(f'SELECT position FROM "{schema}".head FOR UPDATE')
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            conn.rollback()
    return True


def _stuck(projection: SchedulerProjection, now: datetime, grace: float) -> list[str]:
    """Work that is not completed and not moving: a live attempt whose lease expired more
    than `grace` seconds ago (nobody recovered it), or Work in no known state."""
    stuck: list[str] = []
    for work in projection.works.values():
        current = work.current
        if work.state == "completed":
            continue
        if current is not None and current.live:
            if (now - current.lease_expires_at).total_seconds() > grace:
                stuck.append(f"{work.work_id}: lease expired at {current.lease_expires_at}")
        elif work.state not in ("ready", "retry_wait"):
            stuck.append(f"{work.work_id}: {work.state}")
    return stuck


@pytest.mark.slow
def test_racing_processes_with_one_paused_keep_every_guarantee(pg_url: str) -> None:
    PostgresStore(pg_url).close()  # the schema exists before the children race to use it
    children = [
        subprocess.Popen(
            [sys.executable, "-P", "-c", CHILD, pg_url, json.dumps(RACE_CONFIG)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    owners: list[str] = []
    metrics: list[dict[str, int]] = []
    refused: list[int] = []
    submitted = 0
    paused_at: float | None = None
    resumed_at: float | None = None
    try:
        for child in children:
            assert child.stdout is not None
            owners.append(json.loads(child.stdout.readline())["owner"])
        paused, paused_owner, tries = children[0], owners[0], 0
        with rota.open(pg_url, config=RACE_CONFIG, owner="submitter") as submitter:
            submitter.register("race", lambda ctx: None)
            service = submitter.service
            started = time.monotonic()
            pause_from = started + RACE_SECONDS / 3
            pace = threading.Event()  # never set: its timed wait paces the submitter
            while (elapsed := time.monotonic() - started) < RACE_SECONDS:
                scope = "root/team" if submitted % 5 == 0 else "root"
                submitter.submit(
                    f"job-{submitted:05d}",
                    binding="race",
                    input={"i": submitted},
                    scope=scope,
                    safety="idempotent",
                )
                submitted += 1
                now = time.monotonic()
                if paused_at is None and now >= pause_from:
                    # Pause a process while (by the log) it holds a lease, and not in the
                    # middle of an append (holding the log's lock, it would stop every host
                    # instead of losing its leases); else resume it and try the next one.
                    paused, paused_owner = children[tries % 3], owners[tries % 3]
                    tries += 1
                    paused.send_signal(signal.SIGSTOP)
                    if _head_lock_free(pg_url):
                        service.catch_up()  # after the probe: its appends are all visible
                        if any(
                            w.current is not None
                            and w.current.live
                            and w.current.owner == paused_owner
                            for w in service.projection.works.values()
                        ):
                            paused_at = now
                    if paused_at is None:
                        paused.send_signal(signal.SIGCONT)
                elif resumed_at is None and paused_at is not None and now >= paused_at + PAUSE:
                    paused.send_signal(signal.SIGCONT)
                    resumed_at = now
                pace.wait(0.04)
            if resumed_at is None:
                paused.send_signal(signal.SIGCONT)
            assert paused_at is not None, "the paused process never held a lease"

            # At the end of the race: no Work is stuck (every live attempt's lease is
            # current, give or take a recovery pass), nothing is in an unexpected state.
            service.catch_up()
            now_db = submitter.store.now()
            stuck = _stuck(service.projection, now_db, grace=LEASE + 6.0)
            assert not stuck, stuck[:10]
            at_end = Counter(w.state for w in service.projection.works.values())
            print(f"\nsubmitted {submitted} Works in {elapsed:.0f} s; at the end: {dict(at_end)}")

            # Drain: every Work completes.
            deadline = time.monotonic() + 120
            while True:
                service.catch_up()
                states = Counter(w.state for w in service.projection.works.values())
                if states == Counter({"completed": submitted}):
                    break
                assert time.monotonic() < deadline, f"not drained: {dict(states)}"
                submitter.store.wait_for_commit(service.projection.position, 1.0)
    finally:
        for child in children:
            child.send_signal(signal.SIGCONT)
            child.send_signal(signal.SIGTERM)
        for child in children:
            out, _ = child.communicate(timeout=60)
            for line in out.splitlines():
                if line.startswith('{"metrics"'):
                    metrics.append(json.loads(line)["metrics"])
                    refused.append(json.loads(line)["refused"])
    assert [child.returncode for child in children] == [0, 0, 0]

    with open_store(pg_url) as store:
        assert verify_chain(store).ok
        projection = check_log(store, LIMITS, SCOPE_LIMITS)  # no double claim, no overrun
        checked = check_epochs(store)  # no write from a stale epoch
        recovered = _events(store, "core.execution.recovered")
        head = store.head().position
    assert len(projection.works) == submitted
    assert {w.state for w in projection.works.values()} == {"completed"}
    by_owner = Counter(
        w.attempts[-1].owner for w in projection.works.values() if w.attempts
    )  # the last (completing) attempt's owner
    assert set(by_owner) <= set(owners) and len(by_owner) == 3, by_owner
    from_paused = [r for r in recovered if r.event.previous_owner == paused_owner]  # type: ignore[attr-defined]
    assert from_paused, "nobody recovered the paused process's leases"
    # (d) retries are counted by every store (serialization failures, deadlocks, lock
    # timeouts, dropped connections), as are stale expected versions (conflicts).
    assert len(metrics) == 3
    for counters in metrics:
        assert {"retries", "conflicts", "delivery_conflicts"} <= set(counters)
    lost = checked["core.execution.lost"]
    print(
        f"events {head}; completed by owner {dict(by_owner)}; recoveries {len(recovered)} "
        f"({len(from_paused)} from the paused process: "
        f"{Counter(r.event.mode for r in from_paused)}); lost attempts {lost}; "  # type: ignore[attr-defined]
        f"epoch-checked events {sum(checked.values())}; results refused as stale per "
        f"process (the paused one first) {refused}; store metrics per process {metrics}"
    )
