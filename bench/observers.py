"""What the append observers (the decision log, the attempt spans) cost the job lifecycle.

    python -m bench.observers              # 5,000 no-op jobs per case, best of 3
    python -m bench.observers --quick      # 1,000 jobs per case

The lifecycle of `bench.lifecycle` (bulk submit, then `run_until_idle()` with an inline
no-op callable, concurrency 512) in three cases, interleaved in one run: with no append
observer at all (removed after open), as `rota.open` wires it with no logging configured
and no OpenTelemetry SDK provider set (the decision log alone, its lines below the level),
and with `rota run`'s JSON logs at info written to /dev/null. The ratios
compare figures of the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter, process_time

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
from bench.lifecycle import SUBMIT_BATCH, verify_completed, work_items
from bench.workload import batches
from rota.infrastructure.logging import LogSettings, configured

NONE, DEFAULT, JSON = "no observers", "as rota.open wires it", "JSON logs at info"
CASES = (NONE, DEFAULT, JSON)


def run_case(path: Path, jobs: int, case: str) -> tuple[float, float]:
    """Wall and process CPU seconds from the first submit to the last completion."""
    scheduler = rota.open(path, config={"settings": {"concurrency": 512}})
    try:
        if case == NONE:
            scheduler.service.transactions.observers.clear()
        scheduler.register("noop", lambda ctx: None, inline=True)
        groups = batches(work_items(jobs), SUBMIT_BATCH)
        with open(os.devnull, "w") as sink, contextlib.ExitStack() as logs:
            if case == JSON:
                logs.enter_context(configured(LogSettings("json", "info"), sink))
            start, cpu = perf_counter(), process_time()
            for group in groups:
                scheduler.service.lifecycle.submit_many(group)
            scheduler.run_until_idle()
            seconds, cpu = perf_counter() - start, process_time() - cpu
        verify_completed(scheduler, jobs)
    finally:
        scheduler.close()
    return seconds, cpu


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per case (default 5,000)")
    run_options(parser, "1,000 jobs per case")
    args = parser.parse_args(argv)
    jobs = args.jobs or (1_000 if args.quick else 5_000)
    best = Best()
    cpu: dict[str, float] = {}  # the least process CPU per case, microseconds per job
    with workdir(args.dir) as directory:
        print_header("append observers: lifecycle jobs/s", directory)
        for repeat in range(args.repeats):
            for case in CASES:
                path = directory / f"{repeat}-{CASES.index(case)}.db"
                seconds, used = run_case(path, jobs, case)
                rate = best.add("rota", case, jobs, seconds)
                cpu[case] = min(cpu.get(case, float("inf")), used / jobs * 1e6)
                progress(f"repeat {repeat + 1}: {case}: {fmt_rate(rate)} jobs/s, {used:.2f} s CPU")
                remove_db(path)
                remove_db(Path(f"{path}.projections"))
    none = best.get("rota", NONE)
    rows = [
        [
            case,
            fmt_rate(best.get("rota", case)),
            fmt_ratio(best.get("rota", case), none),
            f"{cpu[case]:.0f}",
            fmt_ratio(cpu[case], cpu[NONE]),
        ]
        for case in CASES
    ]
    headers = [f"case ({jobs:,} jobs)", "best jobs/s", "vs none", "least CPU us/job", "vs none"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()
