"""Lifecycle throughput: no-op Work submitted and run to completion, end to end.

    python -m bench.lifecycle              # 20,000 jobs (2,000 for the slow cases)
    python -m bench.lifecycle --quick      # 2,000 jobs (500 for the slow cases)
    python -m bench.lifecycle --profile    # cProfile of one rota run instead
    python -m bench.lifecycle --store 'postgresql://...?schema=rota_bench'   # 1 and 3 hosts
    python -m bench.lifecycle --keys 1000  # rota with 1,000 [[keys]] rules, Works spread on them

rota: `Scheduler.service.submit_many` in batches of 500 (one input per Work), then
`run_until_idle()` (claim, invoke, complete) with an inline no-op callable; concurrency 512
(a cadence pass claims up to 256) and 4 (the default), synchronous FULL (rota's default).
Reference: the stock `eventsourcing.sqlite` recorder (WAL, synchronous FULL) writing a
"claimed" (version 1) and a "completed" (version 2) event per job, one transaction per event
or 256 claims then 256 completions per `insert_events`; and an `Application` saving a `Job`
aggregate after each of its two events (its creation event is the claim). Runs interleaved,
best of 3 per figure.

With `--store postgresql://...?schema=rota_bench...` it measures rota on PostgreSQL instead,
with 1 host and with 3 host processes sharing the schema (`bench.lifecycle_pg`; the schema
is dropped and recreated for every run, and dropped at the end).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from time import perf_counter
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import JSONTranscoder, StoredEvent

import rota
from bench.common import (
    REPEATS,
    Best,
    fmt_rate,
    fmt_ratio,
    peak_rss_mib,
    print_header,
    print_table,
    progress,
    remove_db,
    workdir,
)
from bench.hotspots import GcTimer, print_profile
from bench.workload import batches, es_recorder, es_synchronous, es_transcoder
from rota.domain.submission import SubmitWork, WorkInput

TARGET = 5_000.0  # rota end to end, jobs/s, one process, synchronous FULL
SUBMIT_BATCH = 500
ES_BATCH = 256
ROTA, ROTA_4 = "rota, concurrency 512", "rota, concurrency 4"
ES_BATCHED, ES_NAIVE = f"eventsourcing, {ES_BATCH} events/txn", "eventsourcing, 1 event/txn"
ES_APP = "eventsourcing Application + Aggregate"
PHASES = ("submit", "run", "end to end")
RATIOS = [(ROTA, ES_BATCHED), (ROTA, ES_NAIVE), (ROTA, ES_APP), (ROTA_4, ES_NAIVE)]


@dataclass
class Outcome:
    jobs: int
    events: int
    submit: float  # seconds; 0 where there is no submit phase
    run: float


# -- rota ------------------------------------------------------------------------------------


def key_name(index: int) -> str:
    return f"tenant:t{index:05d}"


def key_rules(keys: int, limit: int = 4) -> list[dict[str, Any]]:
    """`keys` `[[keys]]` rules, each with a weight (1 to 3) and a concurrency limit
    (`limit`; 0: none, so a start writes no `core.capacity.key_claimed` fence)."""
    rules: list[dict[str, Any]] = []
    for i in range(keys):
        rule: dict[str, Any] = {"key": key_name(i), "weight": 1 + i % 3}
        if limit:
            rule["concurrency"] = limit
        rules.append(rule)
    return rules


def work_items(jobs: int, keys: int = 0) -> list[SubmitWork]:
    """`jobs` no-op Works; with `keys`, Work k carries key k mod `keys` (see key_rules)."""
    return [
        SubmitWork(
            work_id=f"w-{k:07d}",
            binding="noop",
            inputs=(WorkInput({"date": "2026-11-29", "row": k}),),
            keys=(key_name(k % keys),) if keys else (),
        )
        for k in range(jobs)
    ]


def verify_completed(scheduler: rota.Scheduler, jobs: int) -> None:
    states = Counter(work.state for work in scheduler.works())
    if states != Counter({"completed": jobs}):
        raise RuntimeError(f"expected {jobs:,} completed Works, found {dict(states)}")


def run_rota(path: Path, jobs: int, concurrency: int, keys: int = 0, key_limit: int = 4) -> Outcome:
    """`keys`: that many `[[keys]]` rules configured (`key_rules`), the Works spread over
    them."""
    config: dict[str, Any] = {"settings": {"concurrency": concurrency}}
    if keys:
        config["keys"] = key_rules(keys, key_limit)
    scheduler = rota.open(path, config=config)
    try:
        # FULL: SQLite commits on NORMAL and rota fsyncs the WAL after each commit.
        assert scheduler.store._wal_sync is not None  # type: ignore[attr-defined]
        scheduler.register("noop", lambda ctx: None, inline=True)
        groups = batches(work_items(jobs, keys), SUBMIT_BATCH)
        start = perf_counter()
        for group in groups:
            scheduler.service.lifecycle.submit_many(group)
        submitted = perf_counter()
        scheduler.run_until_idle()
        done = perf_counter()
        verify_completed(scheduler, jobs)
        events = scheduler.store.head().position
    finally:
        scheduler.close()
    return Outcome(jobs, events, submitted - start, done - submitted)


# -- eventsourcing -----------------------------------------------------------------------


def claim_state(k: int, now: datetime) -> dict[str, Any]:
    """The fields of rota's claim event: ~690 bytes transcoded (rota's own JSON: ~530)."""
    return {
        "work_id": f"w-{k:07d}",
        "attempt": 1,
        "epoch": 1,
        "owner": "vm:12345:0123abcd",
        "lease_expires_at": now + timedelta(seconds=60),
        "deadline": now + timedelta(hours=1),
        "consumed": [2],
        "trigger": 2,
        "pinned": {
            "generation": "c31e1edacbeb",
            "binding": {
                "name": "noop",
                "executor": "noop",
                "config": {},
                "timeout_seconds": None,
                "retry": {"max_attempts": 3, "delays": None, "terminal_on_exhaustion": False},
                "handoff": "stop",
            },
            "registration": {"name": "noop", "pool": "agents", "capabilities": ["stop"]},
            "timeout_seconds": 3600.0,
            "lease_seconds": 60.0,
            "max_segments": 50,
        },
        "timestamp": now,
    }


def complete_state(k: int, now: datetime) -> dict[str, Any]:
    return {"work_id": f"w-{k:07d}", "attempt": 1, "epoch": 1, "data": None, "timestamp": now}


def stored(
    transcoder: JSONTranscoder, ids: Sequence[tuple[int, Any]], version: int, topic: str
) -> list[StoredEvent]:
    """What the stock mapper would produce for one claim (v1) or completion (v2) per job."""
    now = datetime.now(UTC)
    state = claim_state if version == 1 else complete_state
    return [StoredEvent(uid, version, topic, transcoder.encode(state(k, now))) for k, uid in ids]


def run_es(path: Path, jobs: int, per_txn: int) -> Outcome:
    factory, recorder = es_recorder(path)
    assert es_synchronous(recorder) == 2
    transcoder = es_transcoder()
    ids = [(k, uuid5(NAMESPACE_URL, f"work/w-{k:07d}")) for k in range(jobs)]
    try:
        start = perf_counter()
        for group in batches(ids, per_txn):
            recorder.insert_events(stored(transcoder, group, 1, "bench:Claimed"))
            recorder.insert_events(stored(transcoder, group, 2, "bench:Completed"))
        seconds = perf_counter() - start
        assert recorder.max_notification_id() == 2 * jobs
    finally:
        factory.close()
    return Outcome(jobs, 2 * jobs, 0.0, seconds)


class Job(Aggregate):
    """A job's attempt as an eventsourcing aggregate: created by its claim, then completed."""

    @event("Claimed")
    def __init__(self, work_id: str, owner: str, lease_expires_at: datetime) -> None:
        self.work_id, self.owner, self.lease_expires_at = work_id, owner, lease_expires_at
        self.state = "claimed"

    @event("Completed")
    def complete(self, data: Any) -> None:
        self.state, self.data = "completed", data


def run_es_app(path: Path, jobs: int) -> Outcome:
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    app: Application[UUID] = Application(env=env)
    assert es_synchronous(app.recorder) == 2
    try:
        start = perf_counter()
        for k in range(jobs):
            job = Job(f"w-{k:07d}", "vm:12345:0123abcd", datetime.now(UTC))
            app.save(job)
            job.complete(None)
            app.save(job)
        seconds = perf_counter() - start
        assert app.recorder.max_notification_id() == 2 * jobs
    finally:
        app.close()
    return Outcome(jobs, 2 * jobs, 0.0, seconds)


# -- the report ------------------------------------------------------------------------------


def record(best: Best, case: str, outcome: Outcome) -> None:
    jobs = outcome.jobs
    if outcome.submit:
        best.add(case, "submit", jobs, outcome.submit)
    best.add(case, "run", jobs, outcome.run)
    best.add(case, "end to end", jobs, outcome.submit + outcome.run)


def report(best: Best, outcomes: dict[str, Outcome], repeats: int) -> None:
    rows = [
        [case, f"{o.jobs:,}", f"{o.events:,}", f"{o.events / o.jobs:.2f}"]
        + [fmt_rate(best.get(case, phase)) for phase in PHASES]
        for case, o in outcomes.items()
    ]
    print(f"best of {repeats} runs, jobs/s (eventsourcing has no submit: end to end = run):")
    print()
    print_table(["case", "jobs", "events", "events/job", *(f"{p} jobs/s" for p in PHASES)], rows)
    print()
    print("every run, best first:")
    for case, outcome in outcomes.items():
        for phase in PHASES if outcome.submit else ("run",):
            print(f"  {case:38} | {phase:10} | {best.spread(case, phase)}")
    print()
    ratios = [
        [f"{rota_case} / {other}"]
        + [fmt_ratio(best.get(rota_case, phase), best.get(other, "run")) for phase in PHASES[1:]]
        for rota_case, other in RATIOS
    ]
    print_table(["ratio (of the claim+complete rate)", "run", "end to end"], ratios)
    e2e = best.get(ROTA, "end to end")
    verdict = "MET" if e2e >= TARGET else "MISSED"
    print()
    jobs = outcomes[ROTA].jobs
    target = f"rota >= {TARGET:,.0f} jobs/s end to end ({jobs:,} jobs, one process, FULL)"
    print(f"target: {target}: {fmt_rate(e2e)} ({verdict})")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


def print_cumulative(profile: cProfile.Profile, top: int) -> None:
    """The functions (the benchmark's own left out) with the most time spent under them."""
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in stats.values())
    mine = [item for item in stats.items() if "/bench/" not in item[0][0]]
    ranked = sorted(mine, key=lambda item: item[1][3], reverse=True)[:top]
    rows = [
        [f"{os.path.basename(f)}:{line}({name})", f"{calls:,}", f"{cum:.2f}", f"{cum / total:.0%}"]
        for (f, line, name), (_, calls, _, cum, _) in ranked
    ]
    print_table(["function", "calls", "cum s", "share of the run"], rows)
    print()


def profile_rota(directory: Path, jobs: int, top: int, keys: int = 0, key_limit: int = 4) -> None:
    profile = cProfile.Profile()
    path = directory / "profile.db"
    with GcTimer() as gc_timer:
        outcome = profile.runcall(run_rota, path, jobs, 512, keys, key_limit)
    remove_db(path)
    seconds = outcome.submit + outcome.run
    print(f"## cProfile: rota, concurrency 512, {jobs:,} jobs, {fmt_rate(jobs / seconds)} jobs/s")
    print(f"(profiled; GC: {gc_timer.seconds / seconds:.0%} of the wall time)")
    print()
    print_cumulative(profile, top)
    print_profile(profile, top)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lifecycle", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs (default 20000)")
    parser.add_argument("--small", type=int, default=2_000, help="jobs of the slow cases")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="best of N (default 3)")
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 500 for slow cases")
    parser.add_argument("--profile", action="store_true", help="cProfile one rota run")
    parser.add_argument("--dir", default=None, help="where the temporary files go")
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="postgresql://...?schema=rota_bench: run rota on PostgreSQL (bench.lifecycle_pg)",
    )
    parser.add_argument("--hosts", default="1,3", help="with --store: host counts (default 1,3)")
    parser.add_argument(
        "--keys",
        type=int,
        default=0,
        help="rota with N [[keys]] rules (weights 1-3), Work k on key k mod N",
    )
    parser.add_argument(
        "--key-limit", type=int, default=4, help="with --keys: each key's concurrency (0: none)"
    )
    args = parser.parse_args(argv)
    if args.store is not None:
        if not args.store.startswith(("postgresql://", "postgres://")):
            parser.error("--store takes a postgresql:// URL (SQLite is this tool's default)")
        from bench import lifecycle_pg

        forwarded = [args.store, "--hosts", args.hosts, "--repeats", str(args.repeats)]
        forwarded += ["--jobs", str(args.jobs)]
        forwarded += [
            flag for flag, on in (("--quick", args.quick), ("--profile", args.profile)) if on
        ]
        lifecycle_pg.main(forwarded)
        return
    if args.quick:
        args.jobs, args.small = 2_000, 500
    runners: dict[str, Callable[[Path], Outcome]] = {
        ROTA: lambda path: run_rota(path, args.jobs, 512, args.keys, args.key_limit),
        ES_BATCHED: lambda path: run_es(path, args.jobs, ES_BATCH),
        ROTA_4: lambda path: run_rota(path, args.small, 4, args.keys, args.key_limit),
        ES_NAIVE: lambda path: run_es(path, args.small, 1),
        ES_APP: lambda path: run_es_app(path, args.small),
    }
    with workdir(args.dir) as directory:
        print_header("lifecycle throughput: no-op jobs submitted and run (jobs/s)", directory)
        if args.profile:
            profile_rota(directory, args.jobs, 25, args.keys, args.key_limit)
            return
        best, outcomes = Best(), {}
        for rep in range(1, args.repeats + 1):
            for index, (case, runner) in enumerate(runners.items()):
                path = directory / f"case{index}-{rep}.db"
                outcomes[case] = outcome = runner(path)
                record(best, case, outcome)
                rate = fmt_rate(outcome.jobs / (outcome.submit + outcome.run))
                rss = f"peak RSS so far {peak_rss_mib():.0f} MiB"
                progress(f"  {case:38} | rep {rep}: {rate} jobs/s end to end, {rss}")
                remove_db(path)
    report(best, outcomes, args.repeats)


if __name__ == "__main__":
    main()
