"""Shell jobs through `rota run`: the daemon CLI running `true`, fed by another process.

    python -m bench.shell                 # 500 jobs, job_concurrency 16, best of 2
    python -m bench.shell --quick         # 100 jobs
    python -m bench.shell --store 'postgresql://postgres@127.0.0.1:5432/postgres?schema=rota_bench_s'
    python -m bench.shell --callgrind --jobs 300   # the daemon's instructions a job (slow)

The daemon is `python -P -m rota run` over a config file with one shell binding
(`command = ["true"]`); this process submits `--jobs` Works in batches of 100 and follows
the log until it holds that many completions. The daemon's CPU (its own and its reaped
children's: `/proc/PID/stat` utime, stime, cutime, cstime) is read before and after, and
the log's events over those jobs give the events a shell job.
Then, outside the CPU figures, the same daemon runs `--latency-jobs` Works of a second
binding, `command = ["date", "+%s.%N"]`, submitted the same way: each prints the wall time
it started at, and the launch latency of a job is that time less its `AttemptClaimed`'s
recorded time (the store's clock, the same machine's): claim to process start, p50 and p99
(waiting for capacity comes before the claim and is not in it).
Reference in the same run: a plain Python loop of `subprocess.run(["true"])`, the same
number of times, run before and again after the daemon (on a shared machine the load drifts
between the two: the reference is their mean, both are shown). Ratio rota / loop (the
issue's target: >= 0.3x).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rota
from bench.common import fmt_rate, print_header, print_table, progress, remove_db, workdir
from bench.daemon import COMPLETED, follow_completions
from rota.domain.submission import SubmitWork, WorkInput

CONFIG = """\
[settings]
job_concurrency = {concurrency}

[[bindings]]
name = "true"
executor = "shell"
command = ["true"]

[[bindings]]
name = "clock"
executor = "shell"
command = ["date", "+%s.%N"]
"""


@dataclass
class Figures:
    """One rota run: jobs/s, daemon and children CPU seconds a job, events a job, and the
    launch latencies (seconds, claim to process start) of the latency jobs."""

    rate: float
    own: float
    children: float
    events: float
    latencies: list[float]

    def latency(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu(pid: int) -> tuple[float, float]:
    """(own, children's) CPU seconds of a process: its reaped children, and its live ones
    with theirs (the shell executor's spawner, which forks and reaps the wrappers)."""
    fields = _stat(pid)
    tick = os.sysconf("SC_CLK_TCK")
    children = int(fields[13]) + int(fields[14])
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                other = _stat(int(name))
            except OSError:
                continue
            if other[1] == str(pid):
                children += sum(int(value) for value in other[11:15])
    return (int(fields[11]) + int(fields[12])) / tick, children / tick


def loop_rate(jobs: int) -> float:
    start = time.perf_counter()
    for _ in range(jobs):
        subprocess.run(["true"], check=True)
    return jobs / (time.perf_counter() - start)


def submit(submitter: rota.Scheduler, prefix: str, binding: str, jobs: int) -> None:
    for offset in range(0, jobs, 100):
        submitter.service.lifecycle.submit_many(
            [
                SubmitWork(work_id=f"{prefix}-{k:06d}", binding=binding, inputs=(WorkInput(None),))
                for k in range(offset, min(jobs, offset + 100))
            ]
        )


def latencies(store: Any, after: int, upto: int) -> list[float]:
    """Claim to process start of each `clock` job the log holds in (after, upto]."""
    claimed: dict[str, float] = {}
    found: list[float] = []
    position = after
    while position < upto:
        events = store.read(position, 1000)
        if not events:
            break
        position = events[-1].position
        for event in events:
            if event.type == "core.execution.claimed":
                claimed[event.stream] = event.recorded_time.timestamp()
            elif event.type == COMPLETED and event.stream in claimed:
                tail = (getattr(event.event, "data", None) or {}).get("stdout_tail", "")
                try:
                    found.append(float(tail.strip()) - claimed[event.stream])
                except ValueError:
                    continue
    return found


def rota_rate(
    url: str,
    home: Path,
    jobs: int,
    concurrency: int,
    profile: str | None = None,
    latency_jobs: int = 0,
    wrap: Sequence[str] = (),
) -> Figures:
    config = home / "rota.toml"
    config.write_text(CONFIG.format(concurrency=concurrency))
    env = {k: v for k, v in os.environ.items() if k != "ROTA_STORE"}
    log = open(home / "daemon.log", "w")  # noqa: SIM115 (closed with the daemon)
    python = [*wrap, sys.executable, "-P"] + (["-m", "cProfile", "-o", profile] if profile else [])
    daemon = subprocess.Popen(
        [*python, "-m", "rota", "--store", url, "--config", str(config), "run"],
        cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True,
    )  # fmt: skip
    submitter = rota.open(url, config=str(config))
    try:
        store = submitter.store
        # the daemon is up once it holds its lock and waits: its first pass wrote nothing,
        # so wait for its commit-nudge listener (SQLite) or just its first second.
        time.sleep(1.0)
        if daemon.poll() is not None:
            raise RuntimeError(f"rota run exited: {(home / 'daemon.log').read_text()}")
        after = store.head().position
        spy = None
        if os.environ.get("ROTA_BENCH_SPY"):  # a py-spy binary (its own venv): sample the daemon
            out = os.environ.get("ROTA_BENCH_SPY_OUT", "/tmp/rota-bench-spy.txt")
            more = os.environ.get("ROTA_BENCH_SPY_ARGS", "").split()  # e.g. --gil
            rate = os.environ.get("ROTA_BENCH_SPY_RATE", "250")  # samples a second
            spy = subprocess.Popen(
                [os.environ["ROTA_BENCH_SPY"], "record", "-p", str(daemon.pid), "-r", rate,
                 "--format", "raw", "-o", out, "--nonblocking", *more],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(1.0)
        own0, children0 = cpu(daemon.pid)
        start = time.perf_counter()
        submit(submitter, "s", "true", jobs)
        upto = follow_completions(store, after, jobs)
        seconds = time.perf_counter() - start
        own1, children1 = cpu(daemon.pid)
        events = store.head().position - after
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        found: list[float] = []
        if latency_jobs:
            submit(submitter, "c", "clock", latency_jobs)
            found = latencies(store, upto, follow_completions(store, upto, latency_jobs))
    finally:
        submitter.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(600 if wrap else 60)
        log.close()
        errors = (home / "daemon.log").read_text()
        Path("/tmp/perf2-daemon.log").write_text(errors)
        if errors.strip():
            progress(f"the daemon said:\n{errors[-3000:]}")
    own, children = (own1 - own0) / jobs, (children1 - children0) / jobs
    return Figures(jobs / seconds, own, children, events / jobs, found)


def callgrind(directory: Path, args: argparse.Namespace) -> float:
    """The daemon's instructions a job (its own threads, not its children): callgrind's
    totals of a run of `--jobs` jobs less those of a run of 50, over the difference. It
    counts instructions, not time, so it repeats on a loaded machine."""
    totals: list[int] = []
    for jobs in (50, args.jobs):
        out = directory / f"callgrind-{jobs}.out"
        wrap = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        rota_rate(str(directory / f"cg-{jobs}.db"), directory, jobs, args.concurrency, wrap=wrap)
        found = re.findall(rb"^(?:summary|totals):\s+(\d+)", out.read_bytes(), re.MULTILINE)
        if os.environ.get("ROTA_BENCH_KEEP"):  # a folder to keep the output in (annotate it)
            shutil.copy(out, Path(os.environ["ROTA_BENCH_KEEP"]) / out.name)
        totals.append(int(found[-1]))
        progress(f"  callgrind, {jobs} jobs: {totals[-1]:,} instructions")
    return (totals[1] - totals[0]) / (args.jobs - 50)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.shell", description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16, help="job_concurrency")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--latency-jobs", type=int, default=200, help="`date` jobs (0: none)")
    parser.add_argument("--quick", action="store_true", help="100 jobs")
    parser.add_argument("--store", default="", help="postgresql://...?schema=...")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile the daemon (1 run)")
    parser.add_argument(
        "--callgrind", action="store_true",
        help="the daemon's instructions a job under callgrind: runs of 50 and --jobs jobs",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs = 100
    with workdir(args.dir) as directory:
        print_header("shell `true` jobs through `rota run`, fed by another process", directory)
        if args.profile:
            import pstats

            out = str(directory / "daemon.prof")
            run = rota_rate(str(directory / "p.db"), directory, args.jobs, args.concurrency, out)
            print(f"{fmt_rate(run.rate)} jobs/s, {run.own * 1000:.2f} ms daemon CPU/job (profiled)")
            pstats.Stats(out).sort_stats("cumulative").print_stats(45)
            pstats.Stats(out).sort_stats("tottime").print_stats(25)
            return
        if args.callgrind:
            print(f"daemon instructions a `true` job: {callgrind(directory, args):,.0f}")
            return
        rows = []
        for rep in range(1, args.repeats + 1):
            before = loop_rate(args.jobs)
            if args.store:
                from bench.daemon import fresh_store

                url = fresh_store(args.store, directory, rep)
            else:
                url = str(directory / f"shell-{rep}.db")
            run = rota_rate(
                url, directory, args.jobs, args.concurrency, latency_jobs=args.latency_jobs
            )
            after = loop_rate(args.jobs)
            reference = (before + after) / 2
            if not args.store:
                remove_db(directory / f"shell-{rep}.db")
            progress(f"  rep {rep}: rota {fmt_rate(run.rate)}/s, loop {fmt_rate(reference)}/s")
            rows.append(
                [
                    str(rep),
                    fmt_rate(run.rate),
                    f"{run.own * 1000:.2f}",
                    f"{run.children * 1000:.2f}",
                    f"{(run.own + run.children) * 1000:.2f}",
                    f"{run.events:.2f}",
                    f"{run.latency(0.5) * 1000:.1f} / {run.latency(0.99) * 1000:.1f}",
                    fmt_rate(reference),
                    f"{fmt_rate(before)} / {fmt_rate(after)}",
                    f"{run.rate / reference:.2f}x",
                ]
            )
        store = "PostgreSQL" if args.store else "SQLite (synchronous FULL)"
        print(f"{store}; {args.jobs:,} jobs, job_concurrency {args.concurrency}; launch latency")
        print(f"over {args.latency_jobs} `date` jobs after them (claim to process start)")
        print()
        headers = [
            "rep",
            "rota run jobs/s",
            "daemon CPU ms/job",
            "children CPU ms/job",
            "daemon + children ms/job",
            "events/job",
            "launch latency p50 / p99 ms",
            "subprocess.run loop jobs/s",
            "loop before / after",
            "rota / loop",
        ]
        print_table(headers, rows)


if __name__ == "__main__":
    main()
