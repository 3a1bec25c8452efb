"""Bytes per stored Work: the lean Work row (issue 18 item 1) against the whole Work's
encoding the scheduler projection stored before (version 2), in the same run.

    python -m bench.row_bytes                 # 20,000 completed Works and 1,000 running
    python -m bench.row_bytes --quiet 100000

The log comes from the fast generator (`bench.bulk_log`, cached under `--cache`); it is
folded into a scheduler projection in memory, and every Work is encoded both ways: the
whole `WorkState` (`canonical_encoder`, the version 2 row) and the lean row
(`WorkCodec.encode`) plus the `binding/` rows, counted once each and spread over the Works.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import SchedulerProjection
from rota.projections.work_rows import canonical_encoder
from rota.replay.rebuild import fold

from .bulk_log import cached
from .common import command_line


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quiet", type=int, default=20_000, help="completed Works")
    parser.add_argument("--active", type=int, default=1_000, help="running Works")
    parser.add_argument("--cache", default="/tmp/rota-bench-logs")
    args = parser.parse_args(argv)
    path = Path(args.cache) / f"scale-{args.quiet}-{args.active}-0.db"
    counts = cached(path, args.quiet, args.active)
    log = SQLiteStore(path)
    projection = SchedulerProjection()
    fold(log, [projection])
    log.close()
    works = projection.works
    codec = projection.codec
    whole = sum(len(canonical_encoder.encode(work)) for work in works.values())
    lean = sum(len(codec.encode(work)) for work in works.values())
    bindings = sum(len(value) for value in codec.bindings.values())
    attempts = sum(len(work.attempts) for work in works.values())
    n = len(works)
    print(f"command: {command_line()}")
    print(f"{n:,} Works, {attempts:,} attempts, {counts['events']:,} events")
    print()
    print("| row format | Work rows | binding rows | bytes per Work |")
    print("|---|---|---|---|")
    print(f"| whole Work (version 2) | {whole:,} B | - | {whole / n:,.0f} |")
    print(
        f"| lean (version 3) | {lean:,} B | {len(codec.bindings)} ({bindings:,} B) "
        f"| {(lean + bindings) / n:,.0f} |"
    )
    print()
    print(f"lean / whole: {(lean + bindings) / whole:.2f}x")


if __name__ == "__main__":
    main()
