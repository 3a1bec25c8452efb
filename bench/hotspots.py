"""Where rota's append and read time goes: cProfile and the cyclic GC's share.

    python -m bench.hotspots               # 3,000 one-event appends, 20,000 in 100s, 200,000 read
    python -m bench.hotspots --quick

Diagnostics for the figures of `bench.append` and `bench.read`, not a benchmark: cProfile
slows Python code down, so read the shares, not the absolute times. `bench.whatif` splits
the one-event transaction into BEGIN/COMMIT and the rest, and tries the fixes found here.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apsw

from bench.common import print_header, print_table, remove_db, timed, workdir
from bench.read import build_rota, read_rota
from bench.workload import batches, new_events
from rota.infrastructure.sqlite.store import SQLiteStore


class TimedConnection:
    """Wraps the store's writer connection to time its BEGIN and COMMIT statements."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self.seconds = {"BEGIN IMMEDIATE": 0.0, "COMMIT": 0.0}

    def execute(self, sql: str, *args: Any) -> Any:
        start = time.perf_counter()
        result = self._conn.execute(sql, *args)
        if sql in self.seconds:
            self.seconds[sql] += time.perf_counter() - start
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class GcTimer:
    """Time spent in the cyclic garbage collector while active (through `gc.callbacks`)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def print_profile(profile: cProfile.Profile, top: int) -> None:
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in stats.values())
    ranked = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in ranked:
        where = f"{os.path.basename(filename)}:{line}({name})" if line else name
        rows.append(
            [
                where,
                f"{calls:,}",
                f"{tottime * 1000:.0f}",
                f"{tottime / total:.0%}",
                f"{cumtime:.2f}",
            ]
        )
    print_table(["function", "calls", "own ms", "share of all own time", "cum s"], rows)
    print()


def profile_append(directory: Path, count: int, size: int, top: int) -> None:
    events = new_events(count)
    groups = batches(events, size)
    path = directory / f"profile-{size}.db"
    store = SQLiteStore(path)
    profile = cProfile.Profile()

    def body() -> int:
        for group in groups:
            store.append(group)
        return count

    with GcTimer() as gc_timer:
        _, seconds = timed(lambda: profile.runcall(body))
    store.close()
    remove_db(path)
    print(f"## cProfile: append, {size} event(s) per transaction, {count:,} events")
    print(f"(GC: {gc_timer.seconds / seconds:.0%} of the wall time, {gc_timer.collections})")
    print()
    print_profile(profile, top)


def profile_read(directory: Path, count: int, top: int) -> None:
    path = directory / "profile-read.db"
    build_rota(path, new_events(count))
    store = SQLiteStore(path)
    rates: dict[str, float] = {}
    for label, switch in (("GC on", gc.enable), ("GC off", gc.disable)) * 2:
        switch()
        events, seconds = timed(lambda: read_rota(store, 10_000))
        gc.enable()
        rates[label] = max(rates.get(label, 0.0), events / seconds)
    with GcTimer() as gc_timer:
        _, seconds = timed(lambda: read_rota(store, 10_000))
    profile = cProfile.Profile()
    profile.runcall(lambda: read_rota(store, 10_000))
    store.close()
    print(f"## read: {count:,} events, pages of 10,000")
    print(
        f"best of 2: {rates['GC on']:,.0f} events/s with the cyclic GC on, "
        f"{rates['GC off']:,.0f} with it off; GC took {gc_timer.seconds / seconds:.0%} "
        f"of a read's wall time (collections by generation: {gc_timer.collections})"
    )
    print()
    print_profile(profile, top)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hotspots", description=__doc__)
    parser.add_argument("--single", type=int, default=3_000, help="one-event appends")
    parser.add_argument("--batched", type=int, default=20_000, help="events appended in 100s")
    parser.add_argument("--read", type=int, default=200_000, help="events in the read log")
    parser.add_argument("--top", type=int, default=14, help="functions listed per profile")
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--dir", default=None, help="where the temporary files go")
    args = parser.parse_args(argv)
    if args.quick:
        args.single, args.batched, args.read = 500, 5_000, 20_000
    steps: list[Callable[[Path], None]] = [
        lambda d: profile_append(d, args.single, 1, args.top),
        lambda d: profile_append(d, args.batched, 100, args.top),
        lambda d: profile_read(d, args.read, args.top),
    ]
    with workdir(args.dir) as directory:
        print_header("where rota's time goes", directory)
        for step in steps:
            step(directory)


if __name__ == "__main__":
    main()
