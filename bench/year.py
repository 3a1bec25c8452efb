"""A year in production, scaled: schedules and jobs day after day on a time-skipping clock,
with a retention policy pruned daily; the log, the projections and the checks measured as
the days pass (issue 31, "Must show": `bench.year`).

    python -m bench.year                        # 10 schedules every hour, 100 jobs a day,
                                                # 120 days, keep 30 days
    python -m bench.year --days 365 --every 1min --jobs 1000   # the issue's full size

One SQLite store (`--dir`, default a temporary folder; /dev/shm keeps fsyncs cheap) opened
with `rota.open` on a `ManualClock`. Each simulated hour: the clock moves on an hour, the
hour's share of the day's jobs is submitted, and the scheduler runs until idle (the
schedules fire their due times, every job and fire runs an inline no-op). Each day's end:
`rota.replay.retention.run` with one policy (every Work, `--keep` days) and an archive
folder, then the space it freed is given back (`reclaim`). At each day of `--at`: the log
file's bytes (after the reclaim), the projections' rows, `audit verify`'s and a rebuild's
time, and this process's RSS. The ratios are to the first `--at` day (the issue's goal:
every later day within 1.2x of day 30).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rota
from bench.common import print_table
from rota.domain.events.retention import RetentionPolicy
from rota.infrastructure.clock import ManualClock
from rota.replay import retention
from rota.replay.audit import verify_chain
from rota.replay.rebuild import folded

START = datetime(2026, 1, 1, tzinfo=UTC)


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def measure(s: rota.Scheduler, path: Path, day: int) -> dict[str, Any]:
    store = s.service.store
    began = time.perf_counter()
    report = verify_chain(store)
    verify_s = time.perf_counter() - began
    began = time.perf_counter()
    rebuilt, _ = folded(store)
    rebuild_s = time.perf_counter() - began
    return {
        "day": day,
        "events": store.head().position,
        "log MB": file_bytes(path) / 1e6,
        "works": len(rebuilt.works),
        "verify s": verify_s,
        "verify ok": report.ok,
        "rebuild s": rebuild_s,
        "rss MiB": rss_mib(),
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    folder = Path(args.dir or tempfile.mkdtemp(prefix="rota-year-"))
    path, archive = folder / "year.db", folder / "archive"
    clock = ManualClock(START)
    config = {"settings": {"concurrency": 64}}
    policy = RetentionPolicy(name="all", keep_days=args.keep)
    found: list[dict[str, Any]] = []
    per_hour = args.jobs / 24
    submitted = 0.0
    with rota.open(path, clock=clock, config=config, owner="year") as s:
        s.register("job", lambda ctx: None, inline=True)
        for n in range(args.schedules):
            s.schedule(f"s{n}", binding="job", every=args.every)
        for day in range(1, args.days + 1):
            for _hour in range(24):
                clock.advance(3600)
                submitted += per_hour
                while submitted >= 1:
                    submitted -= 1
                    s.submit(f"job-{day}-{_hour}-{submitted:.3f}", binding="job")
                s.run_until_idle(timeout=600)
            retention.run(s.service.store, [policy], clock.now(), archive)
            retention.reclaim(s.service.store, steps=1000)
            shutil.rmtree(archive, ignore_errors=True)  # (the archive is the operator's)
            if day in args.at:
                found.append(measure(s, path, day))
                print(found[-1], flush=True)
    if not args.dir:
        shutil.rmtree(folder, ignore_errors=True)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.year")
    parser.add_argument("--days", type=int, default=120)
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--every", default="1h")
    parser.add_argument("--jobs", type=int, default=100, help="jobs a day")
    parser.add_argument("--keep", type=float, default=30.0, help="retention, days")
    parser.add_argument("--at", default="30,60,90,120", help="days to measure")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    args.at = {int(d) for d in args.at.split(",")}
    rows = run(args)
    first = rows[0] if rows else None
    table = []
    for row in rows:
        ratio = {
            k: row[k] / first[k] if first and first[k] else float("nan")
            for k in ("log MB", "works", "verify s", "rebuild s", "rss MiB")
        }
        table.append(
            [
                str(row["day"]),
                str(row["events"]),
                f"{row['log MB']:.1f} ({ratio['log MB']:.2f}x)",
                f"{row['works']} ({ratio['works']:.2f}x)",
                f"{row['verify s']:.2f} ({ratio['verify s']:.2f}x)",
                f"{row['rebuild s']:.2f} ({ratio['rebuild s']:.2f}x)",
                f"{row['rss MiB']:.0f} ({ratio['rss MiB']:.2f}x)",
                str(row["verify ok"]),
            ]
        )
    print_table(
        ["day", "events", "log MB", "Works folded", "audit verify s", "rebuild s", "RSS MiB", "ok"],
        table,
    )


if __name__ == "__main__":
    main()
