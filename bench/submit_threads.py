"""Group-committed submits: 8 threads calling `Scheduler.submit()` one job per call, against
`Scheduler.submit_many`, and one thread's `submit()` against the path before grouping.

    python -m bench.submit_threads             # 4,000 Works per case
    python -m bench.submit_threads --quick     # 800

Cases, each on a fresh SQLite store (synchronous FULL, rota's default; `--synchronous
normal` to leave the fsync of each commit out), interleaved, best of 3 (every run shown):
- `8 threads, submit()`: 8 threads, each submitting its share one Work (one input) per
  call: the calls are group-committed (`rota.application.group_commit`);
- `submit_many`: the same Works through `Scheduler.submit_many`, 500 per call (one
  transaction each), from one thread: the batch path;
- `submit_many, 8 per call`: the same from one thread, 8 Works a transaction: what 8
  callers that each wait for their own submit can share at best (the ceiling of grouping
  for 8 threads, without its thread hand-offs);
- `8 threads, ungrouped`: the 8 threads running what `Scheduler.submit` did before
  grouping (the binding check, the lifecycle's own `submit`: one transaction per call,
  then the Work's view, which it returned);
- `1 thread, submit()` and `1 thread, ungrouped`: the same two paths from one thread, so a
  single caller's cost with grouping is compared with its cost without.
Only submitting is timed (nothing runs); each run checks every Work is ready. Beside the
wall-clock rate, the process's CPU time per Work (every thread's, the store's checkpoint
thread included: less at the mercy of a loaded machine than the rate) and the WAL fsyncs
per Work. `--cases` runs some of the cases only (their short names: grouped, many, many8,
ungrouped, one, one-ungrouped).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from pathlib import Path
from time import perf_counter

import rota
from bench.common import (
    Best,
    fmt_rate,
    fmt_ratio,
    print_header,
    print_table,
    progress,
    remove_db,
    run_options,
    workdir,
)
from rota.domain.submission import SubmitWork, WorkInput

THREADS = 8
MANY_BATCH = 500
GROUPED, MANY, UNGROUPED = "8 threads, submit()", "submit_many", "8 threads, ungrouped"
MANY_8 = "submit_many, 8 per call"
ONE, ONE_UNGROUPED = "1 thread, submit()", "1 thread, ungrouped"
CASES = (GROUPED, MANY, MANY_8, UNGROUPED, ONE, ONE_UNGROUPED)
SHORT = dict(
    zip(("grouped", "many", "many8", "ungrouped", "one", "one-ungrouped"), CASES, strict=True)
)
TARGET = 0.7  # 8 threads' submit() against submit_many (issue 18)


def _input(k: int) -> dict[str, object]:
    return {"date": "2026-12-01", "row": k}


def _threads(count: int, jobs: int, submit: Callable[[int], object]) -> float:
    """`jobs` submits over `count` threads (Work k on thread k % count); seconds."""
    barrier = threading.Barrier(count + 1)
    failures: list[BaseException] = []

    def worker(t: int) -> None:
        barrier.wait()
        try:
            for k in range(t, jobs, count):
                submit(k)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = perf_counter()
    for thread in threads:
        thread.join()
    elapsed = perf_counter() - start
    if failures:
        raise failures[0]
    return elapsed


class Run:
    """One run of a case: its seconds, CPU seconds, transactions and WAL fsyncs."""

    __slots__ = ("cpu", "fsyncs", "seconds", "transactions")

    def __init__(self, seconds: float, cpu: float, transactions: int, fsyncs: int) -> None:
        self.seconds, self.cpu = seconds, cpu
        self.transactions, self.fsyncs = transactions, fsyncs


def run_case(path: Path, case: str, jobs: int, synchronous: str) -> Run:
    """Submit `jobs` Works in `case`: its seconds, CPU, transactions and fsyncs."""
    remove_db(path)
    config = {"store": {"synchronous": synchronous}}
    scheduler = rota.open(path, projections=False, config=config)
    try:
        scheduler.register("noop", lambda ctx: None, inline=True)
        lifecycle = scheduler.service.lifecycle
        before = scheduler.store.head().position

        def grouped(k: int) -> object:
            return scheduler.submit(f"w-{k:07d}", binding="noop", input=_input(k))

        def ungrouped(k: int) -> object:
            # What `Scheduler.submit` did before grouping: check the binding's executor,
            # submit in a transaction of its own, wake the loop, return the Work's view.
            work_id = f"w-{k:07d}"
            with scheduler.service.lock:
                known = scheduler.service.bindings.get("noop")
                scheduler._binding_paths.require_executor(known, scheduler.executors)
            lifecycle.submit(
                SubmitWork(work_id=work_id, binding="noop", inputs=(WorkInput(_input(k)),))
            )
            scheduler.host.wake.set()
            return scheduler.work(work_id)

        wal = getattr(scheduler.store, "_wal_sync", None)
        fsyncs = wal.fsyncs if wal is not None else 0
        cpu = time.process_time()
        if case in (MANY, MANY_8):
            items = [rota.Submission(f"w-{k:07d}", "noop", input=_input(k)) for k in range(jobs)]
            size = MANY_BATCH if case == MANY else THREADS
            cpu = time.process_time()
            start = perf_counter()
            for offset in range(0, jobs, size):
                scheduler.submit_many(items[offset : offset + size])
            seconds = perf_counter() - start
            transactions = -(-jobs // size)
        else:
            count = THREADS if case in (GROUPED, UNGROUPED) else 1
            submit = grouped if case in (GROUPED, ONE) else ungrouped
            seconds = _threads(count, jobs, submit)
            transactions = scheduler._submits.batches if submit is grouped else jobs
        cpu = time.process_time() - cpu
        fsyncs = (wal.fsyncs if wal is not None else 0) - fsyncs
        written = scheduler.store.head().position - before
        if written != 2 * jobs or len(scheduler.works()) != jobs:
            raise RuntimeError(f"{case}: expected {2 * jobs} events, wrote {written}")
    finally:
        scheduler.close()
    return Run(seconds, cpu, transactions, fsyncs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_options(parser, "800 Works per case instead of 4,000")
    parser.add_argument(
        "--synchronous",
        choices=("full", "normal"),
        default="full",
        help="SQLite synchronous mode (default full, rota's default; normal: no fsync a commit)",
    )
    parser.add_argument(
        "--cases",
        default=",".join(SHORT),
        help=f"comma-separated cases to run (default all: {','.join(SHORT)})",
    )
    args = parser.parse_args()
    cases = [SHORT[name] for name in args.cases.split(",")]
    jobs = 800 if args.quick else 4_000
    best = Best()
    runs: dict[str, list[Run]] = {case: [] for case in cases}
    with workdir(args.dir) as directory:
        print_header("Group-committed submits", directory)
        for repeat in range(args.repeats):
            for case in cases:  # interleaved: each repeat runs every case once
                path = directory / "submit.db"
                run = run_case(path, case, jobs, args.synchronous)
                rate = best.add("rota", case, jobs, run.seconds)
                runs[case].append(run)
                progress(f"run {repeat + 1}: {case}: {fmt_rate(rate)} Works/s")
    rows = [
        [
            case,
            fmt_rate(best.get("rota", case)),
            best.spread("rota", case),
            f"{jobs / min(r.transactions for r in runs[case]):.1f}",
            f"{min(r.cpu for r in runs[case]) / jobs * 1e6:.0f}",
            f"{min(r.fsyncs for r in runs[case]) / jobs:.3f}",
        ]
        for case in cases
    ]
    print(
        f"{jobs:,} Works per case, {THREADS} threads, synchronous {args.synchronous.upper()}, "
        f"best of {args.repeats}"
    )
    header = ["case", "Works/s", "every run", "Works per transaction (best)"]
    print_table([*header, "CPU us per Work (best)", "fsyncs per Work"], rows)
    print()
    ratios = [
        (GROUPED, MANY, f"target >= {TARGET}x"),
        (GROUPED, MANY_8, "against 8 a transaction"),
        (MANY_8, MANY, "8 vs 500 a transaction"),
        (GROUPED, UNGROUPED, "grouping's gain"),
        (ONE, ONE_UNGROUPED, "one caller: no slower"),
    ]
    print_table(
        ["ratio", "best/best", "note"],
        [
            [f"{a} / {b}", fmt_ratio(best.get("rota", a), best.get("rota", b)), note]
            for a, b, note in ratios
            if a in runs and b in runs
        ],
    )


if __name__ == "__main__":
    main()
