"""Read throughput: the whole log, paged and decoded, from rota and from the stock eventsourcing.

    python -m bench.read                   # a log of 200,000 events, pages of 10,000
    python -m bench.read --quick           # 20,000 events

Each system reads a log it wrote itself (built beforehand in bulk transactions of 1,000
events, untimed). The raw apsw rows scan rota's own file with rota's own query and page size:
the floor under rota's read. Every case is read once untimed first (the first pass of a
process runs about a third slower), then the repeats, interleaved; the best is reported.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import apsw
import msgspec

from bench.common import (
    Best,
    fmt_rate,
    fmt_ratio,
    peak_rss_mib,
    print_header,
    print_table,
    progress,
    run_options,
    scalar,
    timed,
    workdir,
)
from bench.workload import (
    EVENT_UNION,
    RAW_PAGE,
    batches,
    es_events,
    es_recorder,
    es_stored,
    es_transcoder,
    new_events,
)
from rota.application.ports import NewEvent
from rota.infrastructure.sqlite.store import SQLiteStore

ROTA = "rota SQLiteStore.read (decoded RecordedEvents)"
RAW = "raw apsw scan, rows only"
RAW_JSON = "raw apsw scan + msgspec.json.decode(data)"
RAW_TYPED = "raw apsw scan + typed msgspec decode (rota's union)"
ES_ROWS = "eventsourcing select_notifications, no decode"
ES = "eventsourcing select_notifications + JSONTranscoder.decode"
CASES = (ROTA, RAW, RAW_JSON, RAW_TYPED, ES_ROWS, ES)
BUILD_BATCH = 1_000


def build_rota(path: Path, events: Sequence[NewEvent]) -> int:
    store = SQLiteStore(path, synchronous="normal")  # only to build quickly; not timed
    try:
        for group in batches(events, BUILD_BATCH):
            store.append(group)
    finally:
        store.close()
    return len(events)


def build_eventsourcing(path: Path, events: Sequence[NewEvent]) -> int:
    factory, recorder = es_recorder(path)
    transcoder = es_transcoder()
    try:
        for group in batches(es_events(events), BUILD_BATCH):
            recorder.insert_events(es_stored(transcoder, group))
    finally:
        factory.close()
    return len(events)


def build_logs(rota_path: Path, es_path: Path, total: int) -> tuple[float, float]:
    """Write the same `total` events to both logs; return each build's seconds."""
    events = new_events(total)
    _, rota_seconds = timed(lambda: build_rota(rota_path, events))
    _, es_seconds = timed(lambda: build_eventsourcing(es_path, events))
    return rota_seconds, es_seconds


def read_rota(store: SQLiteStore, page: int) -> int:
    count, after = 0, 0
    while batch := store.read(after, page):
        count += len(batch)
        after = batch[-1].position
    return count


def scan_raw(conn: apsw.Connection, page: int, decode: Callable[[Any], Any] | None) -> int:
    count, after = 0, 0
    while rows := conn.execute(RAW_PAGE, (after, page)).fetchall():
        if decode is not None:
            for row in rows:
                decode(row[6])
        count += len(rows)
        after = cast(int, rows[-1][0])
    return count


def read_eventsourcing(recorder: Any, page: int, decode: Callable[[bytes], Any] | None) -> int:
    count, start = 0, 1
    while notifications := recorder.select_notifications(start, page):
        if decode is not None:
            for notification in notifications:
                decode(notification.state)
        count += len(notifications)
        start = notifications[-1].id + 1
    return count


def payload_bytes(path: Path, table: str, column: str) -> float:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return float(scalar(conn, f"SELECT avg(length({column})) FROM {table}"))
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.read", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000, help="log size (default 200000)")
    parser.add_argument("--page", type=int, default=10_000, help="page size (default 10000)")
    run_options(parser, quick="a log of 20,000 events")
    args = parser.parse_args(argv)
    if args.quick:
        args.events = 20_000
    total, page = args.events, args.page

    best = Best()
    with workdir(args.dir) as directory:
        print_header(f"read throughput (events/s), {total:,} events, pages of {page:,}", directory)
        rota_path, es_path = directory / "rota.db", directory / "eventsourcing.db"
        progress(f"building the logs ({total:,} events each) ...")
        rota_build, es_build = build_logs(rota_path, es_path, total)
        sizes = (
            payload_bytes(rota_path, "events", "data"),
            payload_bytes(es_path, "stored_events", "state"),
        )

        store = SQLiteStore(rota_path)
        raw = apsw.Connection(str(rota_path), flags=apsw.SQLITE_OPEN_READONLY)
        factory, recorder = es_recorder(es_path)
        untyped = msgspec.json.decode
        typed = msgspec.json.Decoder(EVENT_UNION).decode
        transcoder = es_transcoder()
        runs: dict[str, Callable[[], int]] = {
            ROTA: lambda: read_rota(store, page),
            RAW: lambda: scan_raw(raw, page, None),
            RAW_JSON: lambda: scan_raw(raw, page, untyped),
            RAW_TYPED: lambda: scan_raw(raw, page, typed),
            ES_ROWS: lambda: read_eventsourcing(recorder, page, None),
            ES: lambda: read_eventsourcing(recorder, page, transcoder.decode),
        }
        try:
            for case in CASES:  # one untimed pass each: the first read in a process is slow
                runs[case]()
            for rep in range(1, args.repeats + 1):
                for case in CASES:
                    count, seconds = timed(runs[case])
                    assert count == total, (case, count)
                    rate = best.add(case, "read", count, seconds)
                    progress(f"  rep {rep} | {case}: {fmt_rate(rate)} events/s")
        finally:
            store.close()
            raw.close()
            factory.close()

    rota = best.get(ROTA, "read")
    rows = [
        [case, fmt_rate(best.get(case, "read")), fmt_ratio(rota, best.get(case, "read"))]
        for case in CASES
    ]
    print(f"best of {args.repeats} runs, events/s:")
    print()
    print_table(["case", "events/s", "rota/this"], rows)
    print()
    print("every run, best first:")
    for case in CASES:
        print(f"  {case:58} | {best.spread(case, 'read')}")
    print()
    print(
        f"average payload: rota {sizes[0]:.0f} bytes of JSON, eventsourcing {sizes[1]:.0f}; "
        f"log build (untimed for the figures): rota {fmt_rate(total / rota_build)}/s "
        f"(sync NORMAL, 1,000/txn), eventsourcing {fmt_rate(total / es_build)}/s"
    )
    ratio = rota / best.get(ES, "read")
    print(f"target rota/eventsourcing >= 3x: {ratio:.2f}x ({'met' if ratio >= 3 else 'MISSED'})")
    verdict = "met" if rota >= 300_000 else "MISSED"
    print(f"target rota >= 300k events/s: {fmt_rate(rota)} ({verdict})")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
