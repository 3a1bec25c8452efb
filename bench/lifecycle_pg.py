"""Lifecycle throughput on PostgreSQL: no-op Work end to end, by 1 host and by 3 hosts.

    python -m bench.lifecycle --store 'postgresql://postgres@127.0.0.1:5432/test?schema=rota_bench'
    python -m bench.lifecycle_pg URL [--jobs 20000] [--hosts 1,3] [--repeats 3] [--quick]
    python -m bench.lifecycle_pg URL --profile [--hosts 3]   # cProfile of every host

Every run drops and recreates the URL's schema (it must be named `rota_bench...`: the
benchmark refuses to drop any other) and drops it at the end. A "host" is a separate
process: `rota.open(URL, config={"settings": {"concurrency": C}})` with an inline no-op
callable, exactly the SQLite lifecycle benchmark's scheduler. All hosts are started and
ready (store open, binding registered) before the clock starts; then each submits its
share of the jobs (`service.submit_many`, 500 per call, one input each) and runs the
daemon loop (`Scheduler.run`) until its own projection shows every job of every host
completed. All of them pick from one pool: a host claims whatever Work is ready, whoever
submitted it. End to end = from the start signal to the last host seeing the last job
completed (CLOCK_MONOTONIC is shared by the processes of one machine). Concurrency C
(default 512) is the global limit of the `agents` pool: 512 lets a pass claim up to 256.

Durability is the server's: `synchronous_commit` and `fsync` are printed (rota's
`synchronous` setting is left at its default, which keeps the server's).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

import rota
from bench.common import REPEATS, Best, fmt_rate, print_table, progress
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.postgres.names import identifier, split_schema
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.postgres.transactions import Tx

TARGET = 2_000.0  # jobs/s end to end with 3 hosts
SUBMIT_BATCH = 500
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class HostReport:
    host: int
    submitted: int
    submit_end: float
    end: float
    events: int
    metrics: dict[str, int]
    conflicts: int
    cpu: float
    writes: int  # write transactions (appends) of this host, conflicts included
    write_seconds: float  # wall time in them
    lock_seconds: float  # of which until the log's lock was held (waiting for other hosts)


# -- the schema ------------------------------------------------------------------------------


def reset_schema(url: str, *, create: bool = True) -> None:
    """Drop the benchmark's schema (and recreate rota's tables in it when `create`)."""
    conninfo, schema = split_schema(url)
    if schema is None or not identifier(schema).startswith("rota_bench"):
        raise SystemExit(f"refusing to drop schema {schema!r}: use ?schema=rota_bench")
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if create:
        PostgresStore(url).close()


def server_settings(url: str) -> dict[str, str]:
    conninfo, _ = split_schema(url)
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        names = ("server_version", "synchronous_commit", "fsync", "shared_buffers")
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in names}


# -- one host (a child process) ------------------------------------------------------------


class WriteTimer:
    """Times this process's write transactions and their wait for the log's lock."""

    def __init__(self) -> None:
        self.writes, self.write_seconds, self.lock_seconds = 0, 0.0, 0.0
        write, head = PostgresStore.write, Tx.head

        def timed_write(store: PostgresStore, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return write(store, *args, **kwargs)
            finally:
                self.writes += 1
                self.write_seconds += time.perf_counter() - start

        def timed_head(tx: Tx, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return head(tx, *args, **kwargs)
            finally:
                self.lock_seconds += time.perf_counter() - start

        PostgresStore.write = timed_write  # type: ignore[method-assign, assignment]
        Tx.head = timed_head  # type: ignore[method-assign, assignment]


def run_host(url: str, host: int, hosts: int, jobs: int, concurrency: int, profile: bool) -> None:
    """A host: open, report ready, wait for "go", submit its share, run until all complete."""
    timer = WriteTimer()
    scheduler = rota.open(url, config={"settings": {"concurrency": concurrency}})
    scheduler.register("noop", lambda ctx: None, inline=True)
    mine = [
        SubmitWork(
            work_id=f"w-{k:07d}",
            binding="noop",
            inputs=(WorkInput({"date": "2026-11-29", "row": k}),),
        )
        for k in range(host, jobs, hosts)
    ]
    groups = [mine[i : i + SUBMIT_BATCH] for i in range(0, len(mine), SUBMIT_BATCH)]
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    cpu = time.process_time()
    for group in groups:
        scheduler.service.lifecycle.submit_many(group)
    submit_end = time.monotonic()
    stop = threading.Event()
    finished: list[float] = []
    watcher = threading.Thread(
        target=watch, args=(scheduler, jobs, stop, finished), name="bench-watch"
    )
    watcher.start()
    scheduler.run(stop)  # on this thread, so that --profile sees the daemon loop
    watcher.join()
    end = finished[0]
    service, store = scheduler.service, scheduler.store
    cpu = time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
    report = HostReport(
        host,
        len(mine),
        submit_end,
        end,
        service.projection.position,
        dict(getattr(store, "metrics", {})),
        service.conflicts,
        cpu,
        timer.writes,
        timer.write_seconds,
        timer.lock_seconds,
    )
    scheduler.close()
    print(json.dumps(report.__dict__), flush=True)
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(25)
        print(out.getvalue(), file=sys.stderr, flush=True)


def watch(
    scheduler: rota.Scheduler, jobs: int, stop: threading.Event, finished: list[float]
) -> None:
    """Set `stop` once this host's projection shows every job completed."""
    service, store = scheduler.service, scheduler.store
    while not stop.is_set():
        with service.lock:
            projection = service.projection
            done = len(projection.works) == jobs and not (
                projection.live or projection.startable or projection.timers
            )
            position = projection.position
        if done:
            finished.append(time.monotonic())
            stop.set()
            scheduler.stop()
            return
        store.wait_for_commit(position, 0.05)


# -- the coordinator -------------------------------------------------------------------------


@dataclass
class Outcome:
    hosts: int
    jobs: int
    events: int
    seconds: float
    submit: float  # until the last host finished submitting its share
    reports: list[HostReport]
    busy: float  # the machine's CPUs busy, share of the run (all processes, the server's too)


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot (Linux `/proc/stat`; zeros elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run_case(url: str, hosts: int, jobs: int, concurrency: int, profile: bool) -> Outcome:
    reset_schema(url)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.lifecycle_pg",
                url,
                "--host",
                str(n),
                "--hosts",
                str(hosts),
                "--jobs",
                str(jobs),
                "--concurrency",
                str(concurrency),
                *(["--profile"] if profile else []),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(hosts)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a host failed to start: {line!r}")
        start, ticks = time.monotonic(), cpu_ticks()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        reports: list[HostReport] = []
        for child in children:
            out, _ = child.communicate(timeout=1800)
            if child.returncode != 0:
                raise RuntimeError(f"a host exited with {child.returncode}")
            reports.append(HostReport(**json.loads(out.strip().splitlines()[-1])))
        after = cpu_ticks()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    store = PostgresStore(url)
    try:
        events = store.head().position
        completed = store._query(  # every job completed exactly once
            f"SELECT count(*), count(DISTINCT stream) FROM {store.events_table} "
            "WHERE type = 'core.execution.completed'"
        )[0]
    finally:
        store.close()
    if tuple(completed) != (jobs, jobs):
        raise RuntimeError(f"expected {jobs} completions of {jobs} Works, found {completed}")
    seconds = max(r.end for r in reports) - start
    submit = max(r.submit_end for r in reports) - start
    busy = (after[0] - ticks[0]) / max(1, after[1] - ticks[1])
    return Outcome(hosts, jobs, events, seconds, submit, reports, busy)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lifecycle_pg", description=__doc__)
    parser.add_argument("url", help="postgresql://...?schema=rota_bench (dropped and recreated)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20000)")
    parser.add_argument("--hosts", default="1,3", help="host counts to run (default 1,3)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="best of N (default 3)")
    parser.add_argument("--concurrency", type=int, default=512, help="the pool's limit")
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, one run each")
    parser.add_argument("--profile", action="store_true", help="cProfile every host (stderr)")
    parser.add_argument("--host", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.host is not None:
        run_host(args.url, args.host, int(args.hosts), args.jobs, args.concurrency, args.profile)
        return
    if args.quick:
        args.jobs, args.repeats = 2_000, 1
    if args.profile:
        args.repeats = 1
    counts = [int(n) for n in args.hosts.split(",")]
    settings = server_settings(args.url)
    print("# lifecycle throughput on PostgreSQL: no-op jobs submitted and run (jobs/s)")
    print(f"command: {' '.join(getattr(sys, 'orig_argv', sys.argv))}")
    print(f"python {sys.version.split()[0]}, psycopg {psycopg.__version__}, {os.cpu_count()} CPUs")
    print("server: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    print()
    best = Best()
    outcomes: dict[int, Outcome] = {}
    try:
        for rep in range(1, args.repeats + 1):
            for hosts in counts:
                outcome = run_case(args.url, hosts, args.jobs, args.concurrency, args.profile)
                outcomes[hosts] = outcome
                case = f"{hosts} host{'s' if hosts > 1 else ''}"
                best.add(case, "end to end", outcome.jobs, outcome.seconds)
                best.add(case, "submit", outcome.jobs, outcome.submit)
                conflicts = sum(r.conflicts for r in outcome.reports)
                retries = sum(r.metrics.get("retries", 0) for r in outcome.reports)
                cpu = sum(r.cpu for r in outcome.reports)
                writes = sum(r.writes for r in outcome.reports)
                in_writes = sum(r.write_seconds for r in outcome.reports)
                locking = sum(r.lock_seconds for r in outcome.reports)
                progress(
                    f"  {case:8} | rep {rep}: {fmt_rate(outcome.jobs / outcome.seconds)} jobs/s "
                    f"end to end ({outcome.seconds:.1f} s, submit done at {outcome.submit:.1f} s),"
                    f" {outcome.events:,} events, conflicts {conflicts}, retries {retries}, "
                    f"host CPU {cpu:.1f} s, machine CPUs {outcome.busy:.0%} busy, {writes} writes"
                    f" taking {in_writes:.1f} s ({locking:.1f} s until the lock was held)"
                )
    finally:
        reset_schema(args.url, create=False)
    rows = []
    for hosts, outcome in outcomes.items():
        case = f"{hosts} host{'s' if hosts > 1 else ''}"
        per_host = ", ".join(
            f"{r.submitted:,} submitted/{r.conflicts} conflicts/{r.cpu:.1f} s CPU"
            for r in outcome.reports
        )
        rows.append(
            [
                case,
                f"{outcome.jobs:,}",
                f"{outcome.events / outcome.jobs:.2f}",
                fmt_rate(best.get(case, "end to end")),
                best.spread(case, "end to end"),
                per_host,
            ]
        )
    print(f"best of {args.repeats} runs, jobs/s end to end (the last run's per-host figures):")
    print()
    print_table(["case", "jobs", "events/job", "jobs/s", "every run", "per host"], rows)
    if 3 in outcomes:
        rate = best.get("3 hosts", "end to end")
        verdict = "MET" if rate >= TARGET else "MISSED"
        print()
        print(
            f"target: >= {TARGET:,.0f} jobs/s end to end with 3 hosts: {fmt_rate(rate)} ({verdict})"
        )


if __name__ == "__main__":
    main()
