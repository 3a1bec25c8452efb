"""Rebuilding every projection from a long log, and opening a store whose projections are
current.

    python -m bench.replay                    # logs of 100,000 and 1,000,000 events
    python -m bench.replay --events 300000    # one size (repeatable)
    python -m bench.replay --quick            # 20,000 and 100,000 events
    python -m bench.replay --profile          # also cProfile the rebuild of the largest log
    python -m bench.replay --scale            # 1M events over 11k Works vs ~5M over 1M Works
    python -m bench.replay --scale --same-mix --scale-works 200000 --base /work/base33

`--scale` (issue 18): a rebuild's rate and peak memory must not depend on how many Works
the log holds. Two logs from the fast generator (`bench.bulk_log`: whole lifecycles
appended in batches, cached under /tmp between runs): `--works` + `--running` Works and
renewals up to 1,000,000 events, against `--scale-works` completed Works (five events
each) plus `--running` running ones. Targets: the large log's rate >= 0.8x the small one's
in the same run, peak RSS (this process + the fold's fork) <= 250 MiB.

`--same-mix` (issue 33): lifecycles only, `--scale-works` / 10 and `--running` / 10 Works
against `--scale-works` and `--running` (200,000: 100,406 and 1,004,051 events). `--base
TREE`: the same `--measure rebuild` with TREE's `.venv` and code too, the trees alternating
in `--rounds` rounds; CPU an event (this process + forks) new / base, target <= 0.65x.

Each log is written by `SchedulerService` on a `ManualClock`: `--works` Works submitted,
claimed, invoked and completed (500 per append), `--running` more claimed and invoked and
left running, then lease renewals of the running attempts (`core.execution.renewed`,
exactly what `renew_many` writes, appended 20,000 per transaction) until the log holds
`--events` events. Every size has the same Works, so the projections' size is the same
and only the log's length differs.

Measured, each in a fresh child process (so the builder's memory is not counted):
- rebuild: `rota.replay.rebuild.rebuild` of every persisted projection from position 0
  into a fresh projection file (what `rota replay rebuild` and `recover-corrupt` run):
  events/s over the whole call, the fold and the swap-in separately, and the peak RSS:
  the measuring process's plus any fork's (before issue 33 a fork folded the history
  projection, reading the log again; now every fold shares one read here: 0), summed; the
  interpreter's own after imports in brackets. CPU: this process's, and the fork's.
  Targets: >= 300,000 events/s on the longest log (the issue states it for 1,000,000
  events; a short log's rate is held down by the swap-in, whose cost is per row, not per
  event), peak RSS <= 200 MiB on every log.
- open: what a scheduler pays at start on a current projection file:
  `bootstrap.build_service(..., projections=SQLiteProjectionStore(path))` as `rota.open` wires it
  (load the scheduler projection, open the stored history by its meta) and `catch_up()`
  (applies nothing); first and best of `--repeats`. Target: <= 100 ms whatever the log's length.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rota import bootstrap
from rota.application.ports import NewEvent
from rota.domain.emit import work_stream
from rota.domain.events import LeaseRenewed
from rota.domain.policy import Binding, Registration, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.progress import Progress
from rota.replay.rebuild import rebuild

from .bulk_log import cached
from .common import command_line, progress, remove_db, workdir

BATCH = 500
RENEW_BATCH = 20_000
LEASE = 600.0
REBUILD_TARGET, RSS_TARGET, OPEN_TARGET = 300_000, 200.0, 100.0


def build(path: Path, events: int, works: int, running: int) -> dict[str, int]:
    """Write the log (see the module docstring); its counts."""
    clock = ManualClock(datetime(2026, 11, 29, tzinfo=UTC))
    log = SQLiteStore(path, clock=clock, synchronous="normal")
    service = bootstrap.build_service(
        log,
        settings=Settings(concurrency=works + running + 1, lease_seconds=LEASE),
        owner="bench",
        bindings={"noop": Binding(name="noop", executor="x", config={"command": ["true"]})},
        registrations={"x": Registration(name="x")},
    )

    def start(prefix: str, count: int) -> list[tuple[str, int]]:
        items = [
            SubmitWork(work_id=f"{prefix}-{k:07d}", binding="noop", inputs=(WorkInput({"row": k}),))
            for k in range(count)
        ]
        for first in range(0, count, BATCH):
            service.lifecycle.submit_many(items[first : first + BATCH])
        claimed: list[tuple[str, int]] = []
        while service.projection.startable:
            found = service.lifecycle.start_pass(limit=BATCH).claimed
            claimed += [(c.attempt.execution_id, c.attempt.epoch) for c in found]
            service.lifecycle.invoke_many(claimed[-len(found) :])
        return claimed

    done = start("done", works)
    for first in range(0, len(done), BATCH):
        service.lifecycle.finish_many(
            [(e, epoch, Result(data={"rows": 1})) for e, epoch in done[first : first + BATCH]]
        )
    alive = start("live", running)
    attempts = [(e.rpartition("/")[0], int(e.rpartition("/")[2]), epoch) for e, epoch in alive]
    head = log.head().position
    turn = 0
    while head < events and attempts:
        clock.advance(1)
        expiry = clock.now() + timedelta(seconds=LEASE)
        batch = []
        for _ in range(min(RENEW_BATCH, events - head)):
            work, number, epoch = attempts[turn % len(attempts)]
            turn += 1
            renewed = LeaseRenewed(
                work_id=work, attempt=number, epoch=epoch, lease_expires_at=expiry
            )
            batch.append(NewEvent(work_stream(work), renewed))
        head += log.append(batch).written
    counts = {"events": log.head().position, "works": works + running, "running": running}
    log.close()
    return counts


def peak_rss_mib() -> float:
    """This process's peak RSS (`VmHWM`, kept per address space, so unlike `ru_maxrss` it
    does not include the parent's at the time of the fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Timed(Progress):
    """A silent bar that notes when the fold (its context) ends."""

    ended: float | None = None

    def __init__(self, total: int | None, label: str) -> None:
        super().__init__(total, label, enabled=False)

    def close(self) -> None:
        _Timed.ended = time.perf_counter()
        super().close()


def measure_rebuild(path: Path, profile: bool) -> dict[str, Any]:
    base = peak_rss_mib()
    log = SQLiteStore(path)
    target = default_path(log)
    assert target is not None
    remove_db(target)
    started, cpu = time.perf_counter(), time.process_time()
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    with SQLiteProjectionStore(target) as store:
        report = rebuild(log, store, progress=_Timed)
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert _Timed.ended is not None
    events = log.head().position
    log.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the history fold's fork
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(20)
    return {
        "events": events,
        "seconds": wall,
        "cpu_seconds": cpu,
        "fold_seconds": _Timed.ended - started,
        "swap_seconds": started + wall - _Timed.ended,
        "rate": events / wall,
        "peak_rss_mib": peak_rss_mib(),
        "child_peak_rss_mib": children.ru_maxrss / 1024,
        "child_cpu_seconds": children.ru_utime + children.ru_stime,
        "base_rss_mib": base,
        "rows": report.rows,
        "file_mib": target.stat().st_size / 2**20,
    }


def measure_open(path: Path, repeats: int, profile: bool) -> dict[str, Any]:
    log = SQLiteStore(path)
    target = default_path(log)
    assert target is not None
    times = []
    profiler = cProfile.Profile() if profile else None
    for _ in range(repeats):
        if profiler is not None:
            profiler.enable()
        started = time.perf_counter()
        service = bootstrap.build_service(
            log, settings=Settings(), owner="bench", projections=SQLiteProjectionStore(target)
        )  # as `rota.open` wires it: loads the stored projections
        applied = service.catch_up()
        times.append((time.perf_counter() - started) * 1000)
        if profiler is not None:
            profiler.disable()
        assert applied == 0 and service.projection.position == log.head().position
        assert service.stored is not None and service.stored.store.last_refusal is None
        service.close_projections()
    log.close()
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumtime").print_stats(25)
    return {"first_ms": times[0], "best_ms": min(times), "all_ms": times}  # first: new process


ROOT = Path(__file__).resolve().parent.parent


def child(kind: str, path: Path, *extra: str, tree: Path = ROOT) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (`tree`'s, in `tree`); its JSON result."""
    python = sys.executable if tree == ROOT else str(tree / ".venv" / "bin" / "python")
    done = subprocess.run(
        [python, "-m", "bench.replay", "--measure", kind, str(path), *extra],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench.replay --measure {kind} failed:\n{done.stderr}")
    if done.stderr.strip():
        print(done.stderr, file=sys.stderr)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def scale(args: argparse.Namespace) -> None:
    """`--scale`: the rebuild of a log of many Works against one of few (module docstring)."""
    cache = Path(args.cache)
    shapes = [
        ("few Works", args.works, args.running, args.scale_events),
        ("many Works", args.scale_works, args.running, 0),
    ]
    if args.same_mix:
        shapes[0] = ("few Works", args.scale_works // 10, args.running // 10, 0)
    if args.base is not None:
        compare(args, shapes)
        return
    print(f"command: {command_line()}")
    print("logs from bench.bulk_log, cached in", cache)
    print()
    print(
        "| log | Works | events | rebuild: events/s (wall) | fold + swap | CPU: this + fork | "
        "peak RSS: sum = this + fork | rows |"
    )
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for label, quiet, active, events in shapes:
        path = cache / f"scale-{quiet}-{active}-{events}.db"
        progress(f"building (or reusing) {path} ...")
        counts = cached(path, quiet, active, events)
        os.sync()
        progress(f"rebuilding {label} ...")
        r = child("rebuild", path)
        rss = r["peak_rss_mib"] + r["child_peak_rss_mib"]
        results.append((r, rss))
        print(
            f"| {label} | {quiet + active:,} | {counts['events']:,} | {r['rate']:,.0f} "
            f"({r['seconds']:.1f} s) | {r['fold_seconds']:.1f} + {r['swap_seconds']:.1f} s "
            f"| {r['cpu_seconds']:.1f} + {r['child_cpu_seconds']:.1f} s "
            f"| {rss:.0f} MiB = {r['peak_rss_mib']:.0f} + "
            f"{r['child_peak_rss_mib']:.0f} | {sum(r['rows'].values()):,} |",
            flush=True,
        )
        remove_db(Path(f"{path}.projections"))
    (small, _), (large, _) = results
    ratio = large["rate"] / small["rate"]
    print()
    print(f"rate ratio many / few Works: {ratio:.2f}x (target >= 0.8x): {verdict(ratio >= 0.8)}")
    worst = max(rss for _, rss in results)
    print(f"peak RSS, largest of both: {worst:.0f} MiB (target <= 250): {verdict(worst <= 250)}")


def compare(args: argparse.Namespace, shapes: list[tuple[str, int, int, int]]) -> None:
    """`--scale --base TREE`: both logs rebuilt by this tree and by TREE, alternating."""
    trees = {"new": ROOT, "base": Path(args.base).resolve()}
    cache = Path(args.cache)
    print(f"command: {command_line()}")
    print(f"new: {ROOT}, base: {trees['base']}; logs from bench.bulk_log, cached in {cache}")
    print()
    print(
        "| round | tree | log | Works | events | rebuild: events/s (wall) | fold + swap "
        "| CPU: this + forks | CPU an event | peak RSS: sum = this + forks | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    paths = []
    for _, quiet, active, events in shapes:
        path = cache / f"scale-{quiet}-{active}-{events}.db"
        progress(f"building (or reusing) {path} ...")
        paths.append((path, cached(path, quiet, active, events)))
    os.sync()
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        order = ["new", "base"] if round_ % 2 == 0 else ["base", "new"]
        for name in order:
            for (label, quiet, active, _), (path, counts) in zip(shapes, paths, strict=True):
                progress(f"round {round_ + 1}: {name} rebuilds {label} ...")
                r = child("rebuild", path, tree=trees[name])
                r["cpu"] = r["cpu_seconds"] + r["child_cpu_seconds"]
                r["rss"] = r["peak_rss_mib"] + r["child_peak_rss_mib"]
                found.setdefault((name, label), []).append(r)
                print(
                    f"| {round_ + 1} | {name} | {label} | {quiet + active:,} "
                    f"| {counts['events']:,} | {r['rate']:,.0f} ({r['seconds']:.1f} s) "
                    f"| {r['fold_seconds']:.1f} + {r['swap_seconds']:.1f} s "
                    f"| {r['cpu_seconds']:.1f} + {r['child_cpu_seconds']:.1f} s "
                    f"| {r['cpu'] / r['events'] * 1e6:.2f} us "
                    f"| {r['rss']:.0f} MiB = {r['peak_rss_mib']:.0f} + "
                    f"{r['child_peak_rss_mib']:.0f} | {os.getloadavg()[0]:.1f} |",
                    flush=True,
                )
                remove_db(Path(f"{path}.projections"))
    print()
    few, many = shapes[0][0], shapes[1][0]
    for name in trees:
        runs = list(zip(found[name, few], found[name, many], strict=True))
        walls = [b["rate"] / a["rate"] for a, b in runs]
        cpus = [(b["events"] / b["cpu"]) / (a["events"] / a["cpu"]) for a, b in runs]
        worst = max(r["rss"] for label in (few, many) for r in found[name, label])
        print(
            f"{name}: rate many / few Works (wall) "
            + ", ".join(f"{x:.2f}x" for x in walls)
            + f" (target >= 0.8x: {verdict(min(walls) >= 0.8)}); by CPU "
            + ", ".join(f"{x:.2f}x" for x in cpus)
            + f"; peak RSS {worst:.0f} MiB (target <= 250: {verdict(worst <= 250)})"
        )
    for label in (few, many):
        pairs = list(zip(found["new", label], found["base", label], strict=True))
        each = [n["cpu"] / b["cpu"] for n, b in pairs]
        total = sum(n["cpu"] for n, _ in pairs) / sum(b["cpu"] for _, b in pairs)
        print(
            f"{label}: CPU an event new / base, each round "
            + ", ".join(f"{x:.2f}x" for x in each)
            + f"; all rounds {total:.2f}x"
            + (f" (target <= 0.65x: {verdict(total <= 0.65)})" if label == many else "")
        )


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, action="append", help="log length (repeatable)")
    parser.add_argument("--works", type=int, default=10_000, help="completed Works")
    parser.add_argument("--running", type=int, default=1_000, help="Works left running")
    parser.add_argument("--repeats", type=int, default=5, help="opens per log")
    parser.add_argument("--quick", action="store_true", help="20,000 and 100,000 events")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest rebuild")
    parser.add_argument("--dir", help="where to put the temporary files")
    parser.add_argument("--scale", action="store_true", help="many Works against few")
    parser.add_argument("--scale-works", type=int, default=1_000_000, help="with --scale")
    parser.add_argument("--scale-events", type=int, default=1_000_000, help="with --scale")
    parser.add_argument("--cache", default="/tmp/rota-bench-logs", help="with --scale")
    parser.add_argument("--same-mix", action="store_true", help="with --scale: no renewals")
    parser.add_argument("--base", help="with --scale: a base checkout to compare (its .venv)")
    parser.add_argument("--rounds", type=int, default=2, help="with --base")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        kind, path = args.measure[0], Path(args.measure[1])
        if kind == "open":
            result = measure_open(path, args.repeats, profile=args.profile)
        else:
            result = measure_rebuild(path, profile=args.profile)
        print(json.dumps(result))
        return
    if args.scale:
        scale(args)
        return
    sizes = args.events or ([20_000, 100_000] if args.quick else [100_000, 1_000_000])
    if args.quick:
        args.works, args.running = min(args.works, 2_000), min(args.running, 200)
    print(f"command: {command_line()}")
    print(
        f"{args.works:,} completed Works and {args.running:,} running ones (renewing their "
        "leases) in every log"
    )
    print()
    print(
        "| events | build | rebuild: events/s (wall) | fold + swap | CPU | peak RSS: sum = this + "
        "fork (at start) "
        "| rows (file) | open: first / best |"
    )
    print("|---|---|---|---|---|---|---|---|")
    met = {"rate": True, "rss": True, "open": True}
    with workdir(args.dir) as directory:
        for events in sizes:
            path = directory / f"log-{events}.db"
            progress(f"building a log of {events:,} events ...")
            started = time.perf_counter()
            counts = build(path, events, args.works, args.running)
            built = time.perf_counter() - started
            # Write the new log's pages back to disk before measuring, so the rebuild does
            # not share the machine with the kernel's writeback of the file just written.
            os.sync()
            progress("rebuilding ...")
            r = child("rebuild", path)
            progress("opening ...")
            o = child("open", path, "--repeats", str(args.repeats))
            if args.profile and events == max(sizes):  # apart: cProfile slows them down
                progress("profiling the rebuild and the open (on stderr) ...")
                child("rebuild", path, "--profile")
                child("open", path, "--repeats", "1", "--profile")
            if events == max(sizes):  # the rate target is stated for the longest log
                met["rate"] &= r["rate"] >= REBUILD_TARGET
            rss = r["peak_rss_mib"] + r["child_peak_rss_mib"]  # both processes, summed
            met["rss"] &= rss <= RSS_TARGET
            met["open"] &= o["best_ms"] <= OPEN_TARGET
            rows = sum(r["rows"].values())
            print(
                f"| {counts['events']:,} | {built:.1f} s | {r['rate']:,.0f} "
                f"({r['seconds']:.2f} s) | {r['fold_seconds']:.2f} + {r['swap_seconds']:.2f} s "
                f"| {r['cpu_seconds']:.2f} s | {rss:.0f} MiB = {r['peak_rss_mib']:.0f} + "
                f"{r['child_peak_rss_mib']:.0f} ({r['base_rss_mib']:.0f}) "
                f"| {rows:,} ({r['file_mib']:.1f} MiB) "
                f"| {o['first_ms']:.0f} / {o['best_ms']:.0f} ms |",
                flush=True,
            )
            remove_db(path)
            remove_db(Path(f"{path}.projections"))
    print()
    print(f"rebuild >= {REBUILD_TARGET:,} events/s ({max(sizes):,} events): {verdict(met['rate'])}")
    print(f"rebuild peak RSS <= {RSS_TARGET:.0f} MiB: {verdict(met['rss'])}")
    print(f"open a current store <= {OPEN_TARGET:.0f} ms: {verdict(met['open'])}")


if __name__ == "__main__":
    main()
