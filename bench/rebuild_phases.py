"""Where a rebuild's time goes: the phases of one `rota.replay.rebuild.rebuild` of a log into
a fresh projection file beside it, in this process (wall and CPU seconds each).

    python -m bench.rebuild_phases /tmp/rota-bench-logs/scale-1000000-1000-0.db

(the logs `bench.replay --scale` caches). Phases: the fold here (since issue 33 every
projection, from one read of the log, each spilling into its staging table in the
projection file; before, the scheduler projection alone), within it the spills' `put`, its
`finish` (the Works still held written to the spill, the digest read from it), the wait for
the forked history fold (before issue 33: run with an older checkout's interpreter, `-P`,
this script times its fork too), and the swap (`SQLiteProjectionStore.replace`: the
staging tables renamed into place, a scratch file's rows copied), with `_write_rows`
within it. The fork's CPU is printed beside this process's; the digests end the output so
two runs (two branches) can be compared.
"""

from __future__ import annotations

import importlib
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rota.replay.rebuild as rebuild_module
from rota.infrastructure.spill import Spiller, SpillFile
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore

WALL: dict[str, float] = {}
CPU: dict[str, float] = {}


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            WALL[name] = WALL.get(name, 0.0) + time.perf_counter() - wall
            CPU[name] = CPU.get(name, 0.0) + time.process_time() - cpu

    return wrapper


def main(path: Path) -> None:
    rebuild_module.fold = timed("fold (here)", rebuild_module.fold)
    Spiller.finish = timed("finish (here)", Spiller.finish)  # type: ignore[method-assign]
    # How long the fold here spends handing rows to its spill (the staging table's writes
    # are synced: each batch's commit waits for the disk).
    SpillFile.put = timed("  spill puts (here)", SpillFile.put)  # type: ignore[method-assign]
    try:  # a checkout from before issue 33 folds the history projection in a fork
        side_by_side = importlib.import_module("rota.replay.side_by_side")
        side_by_side._receive = timed("wait for the fork", side_by_side._receive)
    except ImportError:
        pass
    replace, write_rows = SQLiteProjectionStore.replace, SQLiteProjectionStore._write_rows
    SQLiteProjectionStore.replace = timed("swap (replace)", replace)  # type: ignore[method-assign]
    SQLiteProjectionStore._write_rows = timed("  rows copied", write_rows)  # type: ignore[method-assign]
    log = SQLiteStore(path)
    target = default_path(log)
    assert target is not None
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    started = time.perf_counter()
    with SQLiteProjectionStore(target) as store:
        report = rebuild_module.rebuild(log, store)
    total = time.perf_counter() - started
    events = log.head().position
    log.close()
    fork = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{events:,} events in {total:.1f} s: {events / total:,.0f} events/s")
    for name, wall in WALL.items():
        print(f"{name:20s} {wall:7.1f} s wall {CPU[name]:7.1f} s CPU")
    print(
        f"CPU: this process {time.process_time():.1f} s, the fork "
        f"{fork.ru_utime + fork.ru_stime:.1f} s"
    )
    print("digests:", report.digests)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
