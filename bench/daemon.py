"""The daemon path: `Scheduler.run()` / `rota run` fed by ANOTHER process, against the batch.

    python -m bench.daemon                       # SQLite: 10,000 in-process jobs, 200 latencies
    python -m bench.daemon --quick               # 2,000 jobs, 100 latencies
    python -m bench.daemon --store 'postgresql://postgres@127.0.0.1:5432/postgres?schema=rota_bench_d'
                                                 # (recreated each rep, dropped at the end)
    python -m bench.daemon --profile             # cProfile the daemon over the throughput run

One run measures, with the daemon in a process of its own (`--serve`, an embedded
`rota.open(...)` + `register(inline=True)` + `run()`, the same no-op callable as
`bench.lifecycle`) and this process as the submitter:
- idle wake-ups: context switches of every daemon thread (`/proc/PID/task/*/status`) over
  `--idle` seconds with nothing to do, per second; and the loop's own pass count;
- submit -> start: one Work submitted at a time by this process (after an idle pause of
  10-30 ms); the time from its submit's commit returning to the callable starting in the
  daemon (both read `time.time()` on the same machine); median and p99;
- throughput: `--jobs` Works submitted by this process in batches of 500 while the daemon
  runs, until the log holds that many completions; jobs/s end to end, and the daemon's CPU
  (user + system, `/proc/PID/stat`) per job;
- the reference in the same run: `bench.lifecycle.run_rota` (one process, submit_many then
  run_until_idle, concurrency 512) on the same number of jobs. Ratio daemon / lifecycle.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import rota
from bench.common import fmt_rate, print_header, print_table, progress, remove_db, workdir
from rota.domain.submission import SubmitWork, WorkInput

SUBMIT_BATCH = 500
COMPLETED = "core.execution.completed"


# -- the daemon process ------------------------------------------------------------------


def serve(url: str, profile: str | None, inline: bool) -> None:
    """The daemon: an embedded scheduler running its loop until SIGTERM."""
    scheduler = rota.open(url, config={"settings": {"concurrency": 512}})
    scheduler.register("noop", lambda ctx: None, inline=inline)

    def stamp(ctx: Any) -> None:
        sys.stdout.write(f"S {ctx.work_id} {time.time():.6f}\n")
        sys.stdout.flush()

    scheduler.register("stamp", stamp, inline=True)
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop())
    print(f"READY {os.getpid()}", flush=True)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        scheduler.run()
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        record = getattr(scheduler._daemon, "passes", None)
        passes = record.passes if record is not None else -1
        print(f"PASSES {passes}", flush=True)
        scheduler.close()


# -- measuring it from outside -----------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid: int) -> dict[str, int]:
    """Context switches (voluntary + not) per thread name of a process."""
    counts: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
        except OSError:
            continue
        total = sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
        counts[name] = counts.get(name, 0) + total
    return counts


class Daemon:
    def __init__(self, url: str, profile: str | None = None, inline: bool = True) -> None:
        argv = [sys.executable, "-m", "bench.daemon", "--serve", url]
        if not inline:
            argv.append("--pooled")
        if profile:
            argv += ["--profile-out", profile]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self.proc.stdout is not None
        self.out: IO[str] = self.proc.stdout
        line = self.out.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"the daemon did not start: {line!r}")
        self.pid = self.proc.pid

    def stamp(self) -> tuple[str, float]:
        line = self.out.readline().split()
        if not line or line[0] != "S":
            raise RuntimeError(f"unexpected daemon output {line!r}")
        return line[1], float(line[2])

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        passes = -1
        for line in self.out:
            if line.startswith("PASSES"):
                passes = int(line.split()[1])
        self.proc.wait(timeout=60)
        return passes


def idle_wakeups(daemon: Daemon, seconds: float) -> tuple[float, dict[str, int]]:
    time.sleep(1.0)  # let the start-up settle
    before = switches(daemon.pid)
    time.sleep(seconds)
    after = switches(daemon.pid)
    per_thread = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    return sum(per_thread.values()) / seconds, per_thread


def latencies(daemon: Daemon, submitter: rota.Scheduler, samples: int) -> list[float]:
    found: list[float] = []
    rng = random.Random(7)
    for k in range(samples):
        time.sleep(rng.uniform(0.01, 0.03))  # bench pacing: let the daemon go idle again
        work_id = f"lat-{k:05d}"
        submitter.submit(work_id, binding="stamp", input={"k": k})
        committed = time.time()
        started_id, started = daemon.stamp()
        assert started_id == work_id, (started_id, work_id)
        found.append(started - committed)
    return found


def follow_completions(store: Any, after: int, jobs: int) -> int:
    """Read the log from `after` until it holds `jobs` completions; return the position."""
    done, position = 0, after
    while done < jobs:
        events = store.read(position, 1000)
        if not events:
            store.wait_for_commit(position, 0.05)
            continue
        position = events[-1].position
        done += sum(1 for event in events if event.type == COMMITTED_TYPE)
    return position


COMMITTED_TYPE = COMPLETED


def throughput(daemon: Daemon, submitter: rota.Scheduler, jobs: int) -> tuple[float, float]:
    store = submitter.store
    after = store.head().position
    items = [
        SubmitWork(
            work_id=f"w-{k:07d}",
            binding="noop",
            inputs=(WorkInput({"date": "2026-11-29", "row": k}),),
        )
        for k in range(jobs)
    ]
    cpu0, start = cpu_seconds(daemon.pid), time.perf_counter()
    for offset in range(0, jobs, SUBMIT_BATCH):
        submitter.service.lifecycle.submit_many(items[offset : offset + SUBMIT_BATCH])
    follow_completions(store, after, jobs)
    seconds = time.perf_counter() - start
    cpu = cpu_seconds(daemon.pid) - cpu0
    return jobs / seconds, cpu / jobs


def lifecycle_rate(directory: Path, jobs: int, rep: int, url: str = "") -> float:
    """`bench.lifecycle`'s rota case on the same number of jobs (PostgreSQL: one host of
    `bench.lifecycle_pg` on the same schema, recreated)."""
    if url:
        from bench.lifecycle_pg import run_case

        return jobs / run_case(url, 1, jobs, 512, False).seconds
    from bench.lifecycle import run_rota

    path = directory / f"lifecycle-{rep}.db"
    outcome = run_rota(path, jobs, 512)
    remove_db(path)
    return jobs / (outcome.submit + outcome.run)


def fresh_store(base: str, directory: Path, rep: int) -> str:
    if base.startswith(("postgresql://", "postgres://")):
        from bench.lifecycle_pg import reset_schema  # a schema named rota_bench...

        reset_schema(base)
        return base
    return str(directory / f"daemon-{rep}.db")


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.daemon", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--latency", type=int, default=200, help="submit->start samples")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle counted")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 100 latencies")
    parser.add_argument(
        "--store", default="", help="postgresql://...?schema=rota_bench...: on PostgreSQL"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the daemon (1 run)")
    parser.add_argument("--dir", default=None)
    parser.add_argument(
        "--pooled", action="store_true", help="the no-op on the callable pool, not inline"
    )
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.profile_out, not args.pooled)
        return
    if args.quick:
        args.jobs, args.latency = 2_000, 100
    try:
        measure(args)
    finally:
        if args.store:  # the benchmark's own schema (named rota_bench...), not left behind
            from bench.lifecycle_pg import reset_schema

            reset_schema(args.store, create=False)


def measure(args: argparse.Namespace) -> None:
    """The runs and their table (`main`'s options)."""
    with workdir(args.dir) as directory:
        print_header("the daemon path: a daemon process fed by another process", directory)
        if args.profile:
            url = fresh_store(args.store, directory, 0)
            out = str(directory / "daemon.prof")
            daemon = Daemon(url, profile=out, inline=not args.pooled)
            submitter = rota.open(url)
            rate, cpu = throughput(daemon, submitter, args.jobs)
            submitter.close()
            daemon.stop()
            print(f"{fmt_rate(rate)} jobs/s, {cpu * 1000:.2f} ms CPU/job (profiled)")
            import pstats

            pstats.Stats(out).sort_stats("cumulative").print_stats(40)
            pstats.Stats(out).sort_stats("tottime").print_stats(30)
            return
        rows = []
        for rep in range(1, args.repeats + 1):
            url = fresh_store(args.store, directory, rep)
            daemon = Daemon(url, inline=not args.pooled)
            submitter = rota.open(url)
            try:
                wake_rate, per_thread = idle_wakeups(daemon, args.idle)
                lat = latencies(daemon, submitter, args.latency)
                rate, cpu = throughput(daemon, submitter, args.jobs)
            finally:
                submitter.close()
                passes = daemon.stop()
            reference = lifecycle_rate(directory, args.jobs, rep, args.store)
            progress(f"  rep {rep}: daemon {fmt_rate(rate)}/s, lifecycle {fmt_rate(reference)}/s")
            busiest = ", ".join(
                f"{name} {count / args.idle:.1f}"
                for name, count in sorted(per_thread.items(), key=lambda i: -i[1])[:3]
                if count
            )
            rows.append(
                [
                    str(rep),
                    f"{wake_rate:.1f} ({busiest or '-'})",
                    f"{statistics.median(lat) * 1000:.1f}",
                    f"{percentile(lat, 0.99) * 1000:.1f}",
                    fmt_rate(rate),
                    f"{cpu * 1000:.2f}",
                    fmt_rate(reference),
                    f"{rate / reference:.2f}x",
                    str(passes),
                ]
            )
            remove_db(directory / f"daemon-{rep}.db")
        store = "PostgreSQL" if args.store else "SQLite (synchronous FULL)"
        print(f"{store}; {args.jobs:,} jobs, {args.latency} latency samples, {args.idle} s idle")
        print()
        headers = [
            "rep",
            "idle wake-ups/s (top threads)",
            "submit->start median ms",
            "p99 ms",
            "daemon jobs/s",
            "daemon CPU ms/job",
            "lifecycle jobs/s",
            "daemon / lifecycle",
            "loop passes",
        ]
        print_table(headers, rows)


if __name__ == "__main__":
    main()
