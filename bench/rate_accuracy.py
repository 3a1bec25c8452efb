"""Rate-limit accuracy: one token bucket shared by several hosts, under a backlog.

    python -m bench.rate_accuracy                       # SQLite, 3 hosts, 10 minutes
    python -m bench.rate_accuracy --store 'postgresql://postgres@127.0.0.1:5432/test?schema=rota_bench_rate'

`[[rates]] key = "resource:stripe" rate = "100/min" burst = 10`, `--works` (2,000) Works
carrying the key, submitted at the start, an inline no-op callable (each attempt completes
in the pass that starts it), and `--hosts` (3) schedulers on ONE store with distinct
owners, run for `--minutes` (10) simulated minutes.

Time is simulated and shared: on SQLite a `ManualClock` all hosts read; on PostgreSQL the
store's clock is the database's, so the benchmark shadows `clock_timestamp()` in its own
schema (the URL's schema must start with `rota_bench`; it is dropped and recreated, and
dropped at the end) and sets it, and each host's store asks it every time
(`clock_refresh=0`). The hosts run as the daemon loop does, one after the other in one
process: a host passes when its `next_wake` (renewals, timers, the next token for Work
held back by a rate) is due, and when the log moved since its last pass (wake on commit).
Nothing sleeps: the clock jumps to the next due pass.

Starts per minute are counted from the log (`core.rate.taken`: each take is a start, at
its `decided_at`), checked against the claims, and the bucket is folded again from its
events (each take allowed, the final `tat_us` equal to the fold). Asserted: no minute
above 100 + burst; the minutes after the first within 2% of 100 (the backlog lasts);
every start's lateness past the moment its token was due is printed.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import psycopg

import rota
from bench.common import print_table, progress
from rota.domain.events import AttemptClaimed, RateTaken
from rota.domain.flow import micros
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import Config
from rota.infrastructure.postgres.names import identifier, split_schema
from rota.infrastructure.postgres.store import PostgresStore

START = datetime(2026, 11, 2, 10, tzinfo=UTC)
BUCKET = "resource:stripe"
RATE, BURST = 100, 10  # a minute
MAX_PASSES_AT_ONE_INSTANT = 200


class PgClock:
    """The database's clock in the benchmark's schema, set by the benchmark (as
    tests/postgres.py's DatabaseClock): `clock_timestamp()` shadowed by a one-row table."""

    def __init__(self, url: str, start: datetime) -> None:
        conninfo, schema = split_schema(url)
        if schema is None or not identifier(schema).startswith("rota_bench"):
            raise SystemExit(f"refusing to use schema {schema!r}: name it rota_bench...")
        self.conninfo, self.schema, self._now = conninfo, schema, start
        self.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self.execute(
            f'CREATE SCHEMA "{schema}"; '
            f'CREATE TABLE "{schema}".bench_clock (at timestamptz NOT NULL); '
            f'CREATE FUNCTION "{schema}".clock_timestamp() RETURNS timestamptz '
            f'LANGUAGE sql STABLE AS $$ SELECT at FROM "{schema}".bench_clock $$'
        )
        self.execute(f'INSERT INTO "{schema}".bench_clock VALUES (%s)', (start,))
        options = quote(f"-c search_path={schema},pg_catalog")
        self.url = f"{url}&options={options}"

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.encode(), params)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self.execute(f'UPDATE "{self.schema}".bench_clock SET at = %s', (self._now,))

    def drop(self) -> None:
        self.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def config() -> dict[str, Any]:
    return {
        "settings": {"concurrency": 64},
        "rates": [{"key": BUCKET, "rate": f"{RATE}/min", "burst": BURST}],
    }


def open_hosts(store: str | None, hosts: int, path: str) -> tuple[list[rota.Scheduler], Any]:
    """`hosts` schedulers on one store, and the clock they share."""
    if store is None:
        clock = ManualClock(START)
        opened = [
            rota.open(path, clock=clock, config=config(), owner=f"host{i}", projections=False)
            for i in range(hosts)
        ]
        return opened, clock
    pg = PgClock(store, START)
    parsed = Config.parse(config())
    opened = [
        rota.Scheduler(PostgresStore(pg.url, clock_refresh=0), config=parsed, owner=f"host{i}")
        for i in range(hosts)
    ]
    return opened, pg


def drive(
    hosts: list[rota.Scheduler], clock: Any, seconds: float, *, race: bool, seed: int = 1
) -> int:
    """Run the hosts as their daemon loops would until `seconds` have passed; passes run.
    `race`: the hosts due at one instant pass at once (threads), so their appends race."""
    end = clock.now() + timedelta(seconds=seconds)
    due = [clock.now()] * len(hosts)
    seen = [-1] * len(hosts)
    passes = 0
    at_instant, instant = 0, clock.now()
    order = random.Random(seed)  # which ready host passes first (seeded)
    while True:
        now = clock.now()
        heads = hosts[0].store.head().position
        ready = [
            i
            for i, s in enumerate(hosts)
            if due[i] <= now or seen[i] != heads or s.host.wake.is_set()
        ]
        if not ready:
            nxt = min(due)
            if nxt >= end:
                return passes
            clock.advance((nxt - now).total_seconds())
            continue
        if now != instant:
            instant, at_instant = now, 0
        order.shuffle(ready)
        if race and len(ready) > 1:
            at_once(hosts[i] for i in ready)
            for i in ready:  # each pass began at `heads`: what came after wakes it again
                seen[i] = heads
        else:
            for i in ready:
                hosts[i].host.wake.clear()
                tick(hosts[i])
                seen[i] = hosts[i].store.head().position
        for i in ready:
            passes += 1
            at_instant += 1
            wait = max(hosts[i].host.next_wake(5.0), 0.001)
            due[i] = clock.now() + timedelta(seconds=wait)
        if at_instant > MAX_PASSES_AT_ONE_INSTANT:
            raise RuntimeError(f"livelock: {at_instant} passes at {instant.isoformat()}")


def tick(scheduler: rota.Scheduler) -> None:
    report = scheduler.tick()
    if report.errors:
        raise RuntimeError(f"{scheduler.service.owner}: {report.errors}")


def at_once(schedulers: Iterable[rota.Scheduler]) -> None:
    """One pass of each, all at the same time (threads started together)."""
    group = list(schedulers)
    barrier = threading.Barrier(len(group))
    errors: list[BaseException] = []

    def one(scheduler: rota.Scheduler) -> None:
        scheduler.host.wake.clear()
        barrier.wait(30)
        try:
            tick(scheduler)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(s,)) for s in group]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def fold_check(takes: list[RateTaken]) -> tuple[int, int]:
    """Fold the bucket from its events; (the fold's final tat, the log's). Raises when a
    take was not allowed at its decision."""
    tat = 0
    for event in takes:
        now = micros(event.decided_at)
        for take in event.takes:
            t = max(tat, now) + take.cost * event.interval_us
            if t - event.burst * event.interval_us > now:
                raise AssertionError(f"a take beyond the bucket at {event.decided_at}")
            tat = t
        if tat != event.tat_us:
            raise AssertionError(f"tat_us {event.tat_us} != the fold's {tat}")
    return tat, takes[-1].tat_us if takes else 0


def measure(
    store_url: str | None, hosts: int, works: int, minutes: int, path: str, *, race: bool
) -> None:
    opened, clock = open_hosts(store_url, hosts, path)
    try:
        for s in opened:
            s.register("noop", lambda ctx: None, inline=True)
        items = [
            SubmitWork(work_id=f"w-{k:05d}", binding="noop", inputs=(WorkInput(k),), keys=(BUCKET,))
            for k in range(works)
        ]
        for k in range(0, works, 500):
            opened[0].service.lifecycle.submit_many(items[k : k + 500])
        began = time.perf_counter()
        passes = drive(opened, clock, minutes * 60, race=race)
        conflicts = sum(s.service.conflicts for s in opened)
        wall = time.perf_counter() - began
        records = []
        position = 0
        while batch := opened[0].store.read(position, 10_000):
            records.extend(batch)
            position = batch[-1].position
    finally:
        for s in opened:
            s.close()
        if isinstance(clock, PgClock):
            clock.drop()
    taken = [e for e in (r.event for r in records) if isinstance(e, RateTaken)]
    claims = [e for e in (r.event for r in records) if isinstance(e, AttemptClaimed)]
    per_minute: Counter[int] = Counter()
    by_host: Counter[str] = Counter()
    lateness: list[float] = []
    tat = 0
    interval = taken[0].interval_us if taken else 0
    for event in taken:
        minute = int((event.decided_at - START).total_seconds() // 60)
        now = micros(event.decided_at)
        for take in event.takes:
            per_minute[minute] += take.cost
            due_us = tat + (take.cost - event.burst) * event.interval_us  # rota.domain.flow.due
            lateness.append(max(0, now - max(due_us, micros(START))) / 1e6)
            tat = max(tat, now) + take.cost * event.interval_us
    for claim in claims:
        by_host[claim.owner] += 1
    final, logged = fold_check(taken)
    starts = sum(per_minute.values())
    assert starts == len(claims), f"{starts} takes, {len(claims)} claims"
    kind = "PostgreSQL" if store_url else "SQLite"
    print(
        f"## {kind}: {hosts} hosts, {works:,} Works on {BUCKET} ({RATE}/min, burst {BURST}), "
        f"{minutes} simulated minutes"
    )
    print()
    rows = [[str(m), str(per_minute.get(m, 0))] for m in range(minutes)]
    print_table(["minute", "starts"], rows)
    print()
    late = sorted(lateness[BURST:])
    print(f"starts: {starts:,} ({dict(sorted(by_host.items()))} by host), passes {passes:,}")
    mode = "at once (threads)" if race else "one after the other"
    print(f"hosts due together passed {mode}; conflicting appends re-decided: {conflicts:,}")
    print(f"bucket: interval {interval:,} us; fold's final tat {final} == log's {logged}")
    if late:
        p50, p99 = late[len(late) // 2], late[min(len(late) - 1, int(len(late) * 0.99))]
        print(
            "lateness past the token's due time: "
            f"p50 {p50:.3f} s, p99 {p99:.3f} s, max {late[-1]:.3f} s"
        )
    print(f"wall time {wall:.1f} s")
    worst = max(per_minute.values())
    later = [per_minute.get(m, 0) for m in range(1, minutes)]
    off = max(abs(c - RATE) / RATE for c in later) if later else 0.0
    ok_max = worst <= RATE + BURST
    ok_rate = off <= 0.02
    print(f"max per minute {worst} <= {RATE + BURST}: {'OK' if ok_max else 'FAILED'}")
    verdict = "OK" if ok_rate else "FAILED"
    print(f"minutes 1-{minutes - 1} within 2% of {RATE}: worst {off:.1%}: {verdict}")
    print()
    if not (ok_max and ok_rate):
        raise SystemExit(1)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rate_accuracy", description=__doc__)
    parser.add_argument("--store", default=None, help="postgresql://...?schema=rota_bench...")
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--works", type=int, default=2_000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument(
        "--race", action="store_true", help="hosts due at one instant pass at once (threads)"
    )
    args = parser.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/rate.db"
        if args.store is None:
            progress(f"SQLite at {path}")
        measure(args.store, args.hosts, args.works, args.minutes, path, race=args.race)


if __name__ == "__main__":
    main()
