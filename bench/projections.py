"""Opening a projection store that is current, against folding the log from position 0.

    python -m bench.projections                 # 10,000 and 100,000 Works
    python -m bench.projections --works 2000    # one size
    python -m bench.projections --renewals 20   # a longer log, the same state

Each case builds a log through `SchedulerService` (submit, claim, `renewals` lease renewals
per attempt, complete), folds it once and saves the scheduler and history projections, then
times (best of `--repeats`):
- open: `SQLiteProjectionStore(path)` + `load_scheduler(log)` + opening the stored history (its
  meta only) + `catch_up()` (nothing to apply): what a scheduler pays at start;
- replay: a fresh `SchedulerProjection` folded from position 0 (what it pays without one).
Renewals change no row size (a lease expiry is replaced), so they lengthen the log while
the state stays the same: open time follows the number of Works, not the log length.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter, process_time

from rota import bootstrap
from rota.application.live_projections import LiveProjections
from rota.domain.policy import Binding, Registration, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import HistoryProjection, SchedulerProjection
from rota.replay.rebuild import fold

from .common import workdir

BATCH = 500


def build(path: Path, works: int, renewals: int) -> SQLiteStore:
    clock = ManualClock(datetime(2026, 11, 29, tzinfo=UTC))
    log = SQLiteStore(path, clock=clock, synchronous="normal")
    service = bootstrap.build_service(
        log,
        settings=Settings(concurrency=works + 1, lease_seconds=3600, timeout_seconds=86400),
        owner="bench",
        bindings={"noop": Binding(name="noop", executor="x", config={"command": ["true"]})},
        registrations={"x": Registration(name="x")},
    )
    items = [
        SubmitWork(work_id=f"w-{k:07d}", binding="noop", inputs=(WorkInput({"row": k}),))
        for k in range(works)
    ]
    for start in range(0, works, BATCH):
        service.lifecycle.submit_many(items[start : start + BATCH])
    while service.projection.startable:
        service.lifecycle.start_pass(limit=BATCH)
    running = [
        (w.current.execution_id, w.current.epoch)
        for w in service.projection.works.values()
        if w.current is not None
    ]
    for _ in range(renewals):
        clock.advance(1)
        for start in range(0, len(running), BATCH):
            service.lifecycle.renew_many(running[start : start + BATCH])
    done = [(execution, epoch, Result()) for execution, epoch in running]
    for start in range(0, len(done), BATCH):
        service.lifecycle.finish_many(done[start : start + BATCH])
    return log


def best(repeats: int, body: Callable[[], None]) -> tuple[float, float]:
    """The best wall time and the best CPU time of this process over the repeats (CPU time
    leaves out waiting for a core, which on a shared machine can dominate the wall time)."""
    walls, cpus = [], []
    for _ in range(repeats):
        gc.collect()
        wall, cpu = perf_counter(), process_time()
        body()
        cpus.append(process_time() - cpu)
        walls.append(perf_counter() - wall)
    return min(walls), min(cpus)


def case(directory: Path, works: int, renewals: int, repeats: int) -> dict[str, float]:
    path = directory / f"log-{works}-{renewals}.db"
    log = build(path, works, renewals)
    store_path = default_path(log)
    assert store_path is not None
    scheduler, history = SchedulerProjection(), HistoryProjection()
    fold(log, [scheduler, history])
    with SQLiteProjectionStore(store_path) as projections:
        started = perf_counter()
        projections.save([scheduler, history], log)
        saved = perf_counter() - started
    digest = scheduler.digest()
    del scheduler, history

    def open_current() -> None:  # what a scheduler pays at start
        service = bootstrap.build_service(log, settings=Settings(), owner="bench")
        live = LiveProjections(SQLiteProjectionStore(store_path), log)
        service.projection = live.open()
        assert service.catch_up() == 0
        assert service.projection.position == log.head().position
        live.store.close()

    def replay() -> None:
        fresh = SchedulerProjection()
        fold(log, [fresh])

    opened = best(repeats, open_current)
    replayed = best(repeats, replay)
    check = SQLiteProjectionStore(store_path)
    loaded = check.load_scheduler(log)
    assert loaded is not None and loaded.digest() == digest
    check.close()
    events = log.head().position
    size = store_path.stat().st_size
    log.close()
    return {
        "works": works,
        "events": events,
        "open_ms": opened[0] * 1000,
        "open_cpu_ms": opened[1] * 1000,
        "replay_ms": replayed[0] * 1000,
        "replay_cpu_ms": replayed[1] * 1000,
        "save_ms": saved * 1000,
        "store_mib": size / 2**20,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--works", type=int, action="append", help="Works per case (repeatable)")
    parser.add_argument("--renewals", type=int, action="append", help="renewals per attempt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", help="where to put the temporary files")
    args = parser.parse_args(argv)
    sizes = args.works or [10_000, 100_000]
    renewals = args.renewals or [0, 20]
    print(
        "| Works | events | open, stored and current: wall (CPU) | replay from 0: wall (CPU) "
        "| first save | store file |"
    )
    print("|---|---|---|---|---|---|")
    with workdir(args.dir) as directory:
        for works in sizes:
            for count in renewals:
                r = case(directory, works, count, args.repeats)
                print(
                    f"| {r['works']:,.0f} | {r['events']:,.0f} "
                    f"| {r['open_ms']:.0f} ms ({r['open_cpu_ms']:.0f} ms) "
                    f"| {r['replay_ms']:.0f} ms ({r['replay_cpu_ms']:.0f} ms) "
                    f"| {r['save_ms']:.0f} ms | {r['store_mib']:.1f} MiB |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
