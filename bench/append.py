"""Append throughput: rota's SQLiteStore against raw apsw and the stock eventsourcing SQLite.

    python -m bench.append                 # 5,000 one-event and 500 x 100-event transactions
    python -m bench.append --quick         # a small run (500 and 50)

Every system writes to a fresh file in one temporary directory, with the same durability
(WAL, synchronous FULL), and every system makes the same transactions. Within a repeat the
systems take turns: each writes a slice of its transactions (a tenth by default), then the
next one does, in an order that rotates from slice to slice, so a slow patch of the shared
disk (another process's fsyncs) hits all of them alike. A repeat's rate is a system's events
over the sum of its slices' times; the best of the repeats is reported, with every repeat and
the ratio within each repeat.

One event per transaction, "rota" appends as rota's own `submit` does: a new Work's
`WorkSubmitted` with the expected version 0 for its stream (optimistic concurrency: the
stream must be new), an input's `InputAccepted` with no expectation (its delivery identity
makes it idempotent). "rota, no expected" appends the same events with no expectation at
all, for comparison. Batches of 100 are appended with no expectation.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    REPEATS,
    Best,
    fmt_rate,
    fmt_ratio,
    peak_rss_mib,
    print_header,
    print_table,
    progress,
    remove_db,
    scalar,
    workdir,
)
from bench.workload import (
    batches,
    es_events,
    es_recorder,
    es_stored,
    es_synchronous,
    es_transcoder,
    new_events,
    raw_append,
    raw_connect,
    raw_rows,
)
from rota.application.ports import NewEvent
from rota.domain.events import WorkSubmitted
from rota.infrastructure.sqlite.store import SQLiteStore

ROTA_BARE = "rota, no expected"
SYSTEMS = ("rota", ROTA_BARE, "raw apsw", "eventsourcing")
SLICES = 10
Expected = dict[str, int]
# A runner writes `events` in transactions of `size`, `slices` turns long: each `next()` writes
# the next slice and yields the seconds it took; it checks the file and closes it at the end.
Slices = Generator[float, None, None]
Runner = Callable[[Path, Sequence[NewEvent], int, int], Slices]


def split(items: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    """`items` cut into `parts` consecutive slices of (nearly) equal length."""
    bounds = [len(items) * k // parts for k in range(parts + 1)]
    return [items[bounds[k] : bounds[k + 1]] for k in range(parts)]


def slice_times(work: Sequence[Any], slices: int, write: Callable[[Any], object]) -> Slices:
    """Call `write` on every item of `work`, yielding the seconds of each slice."""
    for part in split(work, slices):
        start = time.perf_counter()
        for item in part:
            write(item)
        yield time.perf_counter() - start


def as_submit_expects(new: NewEvent) -> Expected:
    """The expectation rota's `submit` appends this event with (see `_submit_one`)."""
    return {new.stream: 0} if isinstance(new.event, WorkSubmitted) else {}


def run_rota(path: Path, events: Sequence[NewEvent], size: int, slices: int) -> Slices:
    expects = [as_submit_expects(new) for new in events] if size == 1 else None
    return append_rota(path, events, size, slices, expects)


def run_rota_bare(path: Path, events: Sequence[NewEvent], size: int, slices: int) -> Slices:
    return append_rota(path, events, size, slices, None)


def append_rota(
    path: Path,
    events: Sequence[NewEvent],
    size: int,
    slices: int,
    expects: Sequence[Expected] | None,
) -> Slices:
    """Append `events` in groups of `size`, one expectation per group when `expects` is given."""
    store = SQLiteStore(path)  # synchronous="full", the default
    # FULL: SQLite commits on NORMAL and rota fsyncs the WAL after each commit.
    assert store._wal_sync is not None and scalar(store._writer, "PRAGMA synchronous") == 1
    groups = batches(events, size)
    work = list(zip(groups, expects or [{}] * len(groups), strict=True))
    append = store.append
    try:
        yield from slice_times(work, slices, lambda item: append(*item))
        assert store.head_position() == len(events)
    finally:
        store.close()


def run_raw(path: Path, events: Sequence[NewEvent], size: int, slices: int) -> Slices:
    conn = raw_connect(path)
    groups = batches(raw_rows(events), size)
    try:
        yield from slice_times(groups, slices, lambda group: raw_append(conn, group))
        assert scalar(conn, "SELECT count(*) FROM events") == len(events)
    finally:
        conn.close()


def run_eventsourcing(path: Path, events: Sequence[NewEvent], size: int, slices: int) -> Slices:
    factory, recorder = es_recorder(path)
    assert es_synchronous(recorder) == 2
    transcoder = es_transcoder()
    groups = batches(es_events(events), size)
    insert = recorder.insert_events
    try:
        yield from slice_times(groups, slices, lambda group: insert(es_stored(transcoder, group)))
        assert recorder.max_notification_id() == len(events)
    finally:
        factory.close()


RUNNERS: dict[str, Runner] = {
    "rota": run_rota,
    ROTA_BARE: run_rota_bare,
    "raw apsw": run_raw,
    "eventsourcing": run_eventsourcing,
}


def measured(system: str, size: int) -> bool:
    """Batches are appended with no expectation by "rota" already: not measured twice."""
    return system != ROTA_BARE or size == 1


def rotated(systems: Sequence[str], turn: int) -> list[str]:
    """The systems in a different order each turn, so none always follows the same one."""
    shift = turn % len(systems)
    return [*systems[shift:], *systems[:shift]]


def run_repeat(
    directory: Path, events: Sequence[NewEvent], size: int, slices: int, tag: str
) -> dict[str, float]:
    """One repeat of every system, slices interleaved; the seconds each system took."""
    systems = [system for system in SYSTEMS if measured(system, size)]
    paths = {s: directory / f"{s.replace(' ', '-').replace(',', '')}-{tag}.db" for s in systems}
    runs = {s: RUNNERS[s](paths[s], events, size, slices) for s in systems}
    seconds = dict.fromkeys(systems, 0.0)
    try:
        for turn in range(slices):
            for system in rotated(systems, turn):
                seconds[system] += next(runs[system])
        for system in systems:  # the checks after the last slice, and close
            for _ in runs[system]:
                raise AssertionError(f"{system} wrote more slices than {slices}")
    finally:
        for run in runs.values():
            run.close()
        for path in paths.values():
            remove_db(path)
    return seconds


def paired_ratios(best: Best, case: str) -> list[float]:
    """rota/raw within each repeat (the two ran side by side, slice by slice)."""
    rota, raw = best.runs.get(("rota", case), []), best.runs.get(("raw apsw", case), [])
    return [mine / theirs for mine, theirs in zip(rota, raw, strict=True)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.append", description=__doc__)
    parser.add_argument(
        "--events", type=int, default=5_000, help="one-event transactions (default 5000)"
    )
    parser.add_argument(
        "--batches", type=int, default=500, help="multi-event transactions (default 500)"
    )
    parser.add_argument("--batch-size", type=int, default=100, help="events per batch")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="best of N (default 3)")
    parser.add_argument(
        "--slices", type=int, default=SLICES, help="turns the systems take per repeat (10)"
    )
    parser.add_argument("--quick", action="store_true", help="500 and 50 transactions")
    parser.add_argument("--dir", default=None, help="where the temporary files go")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.batches = 500, 50

    cases = [
        (f"1 event/txn ({args.events:,} txns)", args.events, 1),
        (
            f"{args.batch_size} events/txn ({args.batches:,} txns)",
            args.batches * args.batch_size,
            args.batch_size,
        ),
    ]
    best = Best()
    with workdir(args.dir) as directory:
        print_header("append throughput (events/s)", directory)
        for case, total, size in cases:
            events = new_events(total)
            for rep in range(1, args.repeats + 1):
                seconds = run_repeat(directory, events, size, args.slices, f"{size}-{rep}")
                for system, spent in seconds.items():
                    rate = best.add(system, case, total, spent)
                    progress(f"  {case} | {system:17} | rep {rep}: {fmt_rate(rate)} events/s")

    rows = [
        [
            case,
            *(fmt_rate(best.get(system, case)) for system in SYSTEMS),
            fmt_ratio(best.get("rota", case), best.get("raw apsw", case)),
            fmt_ratio(best.get(ROTA_BARE, case), best.get("raw apsw", case)),
            fmt_ratio(best.get("rota", case), best.get("eventsourcing", case)),
        ]
        for case, _, _ in cases
    ]
    print(f"best of {args.repeats} runs, events/s (ratios of the best figures):")
    print()
    print_table(["case", *SYSTEMS, "rota/raw", "no expected/raw", "rota/eventsourcing"], rows)
    print()
    print("every run, best first:")
    width = max(len(case) for case, _, _ in cases)
    for case, _, _ in cases:
        for system in SYSTEMS:
            if best.runs.get((system, case)):
                print(f"  {case:{width}} | {system:17} | {best.spread(system, case)}")
        ratios = paired_ratios(best, case)
        listed = " / ".join(f"{ratio:.2f}" for ratio in ratios)
        print(f"  {case:{width}} | rota/raw per run  | {listed} (in run order)")
    single = best.get("rota", cases[0][0]) / best.get("raw apsw", cases[0][0])
    verdict = "met" if single >= 0.70 else "MISSED"
    median = statistics.median(paired_ratios(best, cases[0][0]))
    print()
    print(f"target rota/raw >= 0.70 for one-event transactions: {single:.2f} ({verdict})")
    print(f"  (median of the per-run ratios: {median:.2f})")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
