"""Append throughput: rota's SQLiteStore against raw apsw and the stock eventsourcing SQLite.

    python -m bench.append                 # 5,000 one-event and 500 x 100-event transactions
    python -m bench.append --quick         # a small run (500 and 50)

Every system writes to a fresh file in one temporary directory, with the same durability
(WAL, synchronous FULL). The repeats are interleaved (rep 1 of every system, then rep 2 ...)
so a slow patch of the disk hits all of them alike; the best of the repeats is reported.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

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
    timed,
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
from rota.infrastructure.sqlite_store import SQLiteStore
from rota.infrastructure.store import NewEvent

SYSTEMS = ("rota", "raw apsw", "eventsourcing")
Runner = Callable[[Path, Sequence[NewEvent], int], tuple[int, float]]


def run_rota(path: Path, events: Sequence[NewEvent], size: int) -> tuple[int, float]:
    store = SQLiteStore(path)  # synchronous="full", the default
    assert scalar(store._writer, "PRAGMA synchronous") == 2
    groups = batches(events, size)

    def body() -> int:
        append = store.append
        for group in groups:
            append(group)
        return len(events)

    try:
        count, seconds = timed(body)
        assert store.head_position() == len(events)
    finally:
        store.close()
    return count, seconds


def run_raw(path: Path, events: Sequence[NewEvent], size: int) -> tuple[int, float]:
    conn = raw_connect(path)
    groups = batches(raw_rows(events), size)

    def body() -> int:
        for group in groups:
            raw_append(conn, group)
        return len(events)

    try:
        count, seconds = timed(body)
        assert scalar(conn, "SELECT count(*) FROM events") == len(events)
    finally:
        conn.close()
    return count, seconds


def run_eventsourcing(path: Path, events: Sequence[NewEvent], size: int) -> tuple[int, float]:
    factory, recorder = es_recorder(path)
    assert es_synchronous(recorder) == 2
    transcoder = es_transcoder()
    groups = batches(es_events(events), size)

    def body() -> int:
        insert = recorder.insert_events
        for group in groups:
            insert(es_stored(transcoder, group))
        return len(events)

    try:
        count, seconds = timed(body)
        assert recorder.max_notification_id() == len(events)
    finally:
        factory.close()
    return count, seconds


RUNNERS: dict[str, Runner] = {
    "rota": run_rota,
    "raw apsw": run_raw,
    "eventsourcing": run_eventsourcing,
}


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
                for system in SYSTEMS:
                    path = directory / f"{system.replace(' ', '-')}-{size}-{rep}.db"
                    count, seconds = RUNNERS[system](path, events, size)
                    rate = best.add(system, case, count, seconds)
                    progress(f"  {case} | {system:13} | rep {rep}: {fmt_rate(rate)} events/s")
                    remove_db(path)

    rows = [
        [
            case,
            *(fmt_rate(best.get(system, case)) for system in SYSTEMS),
            fmt_ratio(best.get("rota", case), best.get("raw apsw", case)),
            fmt_ratio(best.get("rota", case), best.get("eventsourcing", case)),
        ]
        for case, _, _ in cases
    ]
    print(f"best of {args.repeats} runs, events/s (ratios of the best figures):")
    print()
    print_table(["case", *SYSTEMS, "rota/raw", "rota/eventsourcing"], rows)
    print()
    print("every run, best first:")
    width = max(len(case) for case, _, _ in cases)
    for case, _, _ in cases:
        for system in SYSTEMS:
            print(f"  {case:{width}} | {system:13} | {best.spread(system, case)}")
    single = best.get("rota", cases[0][0]) / best.get("raw apsw", cases[0][0])
    verdict = "met" if single >= 0.70 else "MISSED"
    print()
    print(f"target rota/raw >= 0.70 for one-event transactions: {single:.2f} ({verdict})")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
