"""What-if experiments behind the findings in RESULTS.md: sketches, not rota's code.

    python -m bench.whatif                 # 200,000 events read, 3,000 one-event appends
    python -m bench.whatif --quick

1. read: the loop of `SQLiteStore.read` (fetch a page, typed decode, build a record per row)
   into structs the cyclic GC tracks, as rota's are, and into `gc=False` copies of the same
   structs (msgspec's option for objects that never take part in a reference cycle).
2. append: one-event transactions doing the same SQL and hashing as rota's append (delivery
   lookup, stream version, head, SHA-256 link, insert) written as one flat function.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Union, cast

import apsw
import msgspec

from bench.common import (
    Best,
    fmt_rate,
    fmt_ratio,
    print_header,
    print_table,
    remove_db,
    run_options,
    timed,
    workdir,
)
from bench.hotspots import TimedConnection
from bench.read import build_rota, read_rota
from bench.workload import RAW_INSERT, RAW_PAGE, new_events, raw_append, raw_connect, raw_rows
from rota.application.ports import NewEvent, RecordedEvent
from rota.domain.events import ALL_EVENTS
from rota.infrastructure.chain import GENESIS, canonical_envelope, link
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.sqlite.store import SQLiteStore

Split = tuple[float, float]  # (seconds in all, seconds in BEGIN and COMMIT)


def struct_copies(gc: bool) -> tuple[Any, Any]:
    """(union of the event types, RecordedEvent), rebuilt field for field with `gc=gc`."""
    events = []
    for cls in ALL_EVENTS:
        fields = [(f.name, f.type, f.default) for f in msgspec.structs.fields(cls)]
        events.append(
            msgspec.defstruct(
                cls.__name__,
                [(n, t) if d is msgspec.NODEFAULT else (n, t, d) for n, t, d in fields],
                tag=cls.tag(),
                tag_field="type",
                frozen=True,
                kw_only=True,
                gc=gc,
            )
        )
    union: Any = Union[tuple(events)]  # noqa: UP007
    record_fields = [(f.name, f.type) for f in msgspec.structs.fields(RecordedEvent)]
    record_fields[-1] = ("event", union)
    return union, msgspec.defstruct("RecordedEvent", record_fields, frozen=True, gc=gc)


def decode_loop(conn: apsw.Connection, union: Any, record: Any) -> Callable[[], int]:
    decode: Callable[[Any], Any] = msgspec.json.Decoder(union).decode

    def run() -> int:
        count, after = 0, 0
        while rows := conn.execute(RAW_PAGE, (after, 10_000)).fetchall():
            out = [record(r[0], r[1], r[2], r[5], r[7], decode(r[6])) for r in rows]
            count += len(out)
            after = out[-1].position
        return count

    return run


def read_whatif(directory: Path, total: int, repeats: int) -> None:
    path = directory / "whatif-read.db"
    build_rota(path, new_events(total))
    store = SQLiteStore(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    cases: dict[str, Callable[[], int]] = {
        "rota SQLiteStore.read": lambda: read_rota(store, 10_000),
        "same loop, GC-tracked structs": decode_loop(conn, *struct_copies(gc=True)),
        "same loop, gc=False structs": decode_loop(conn, *struct_copies(gc=False)),
    }
    best = Best()
    for run in cases.values():
        run()  # warm-up, untimed
    for _ in range(repeats):
        for name, run in cases.items():
            best.add(name, "read", *timed(run))
    store.close()
    conn.close()
    rota = best.get("rota SQLiteStore.read", "read")
    print(f"## read and decode {total:,} events (best of {repeats}, events/s)")
    print()
    rows = [[n, fmt_rate(best.get(n, "read")), fmt_ratio(best.get(n, "read"), rota)] for n in cases]
    print_table(["case", "events/s", "vs rota"], rows)
    print()


def flat_append(conn: apsw.Connection, new: NewEvent) -> None:
    """rota's SQL and hashing for one event, with none of its bookkeeping."""
    tag, type_version, payload = DEFAULT_CODEC.encode(new.event)
    conn.execute("BEGIN IMMEDIATE")
    if new.delivery_id is not None:
        query = "SELECT position FROM events WHERE delivery_id = ?"
        if conn.execute(query, (new.delivery_id,)).fetchone() is not None:
            raise AssertionError("duplicate delivery in a fresh log")
    query = "SELECT max(version) FROM events WHERE stream = ?"
    version = (conn.execute(query, (new.stream,)).fetchone() or (0,))[0] or 0
    head = conn.execute("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
    last = head.fetchone()
    position, previous = (0, GENESIS) if last is None else (last[0], bytes.fromhex(last[1]))
    at = datetime.now(UTC).isoformat(timespec="microseconds")[:-6] + "Z"
    data = payload.decode()
    envelope = canonical_envelope(
        position + 1, new.stream, version + 1, tag, type_version, new.delivery_id, at, data
    )
    digest = link(previous, envelope).hex()
    row = (position + 1, new.stream, version + 1, tag, type_version, new.delivery_id, data)
    conn.execute(RAW_INSERT, (*row, at, digest))
    conn.execute("COMMIT")


def append_whatif(directory: Path, total: int, repeats: int) -> None:
    events = new_events(total)
    path = directory / "whatif-append.db"

    def measure(conn: TimedConnection, body: Callable[[], object]) -> Split:
        start = time.perf_counter()
        body()
        return time.perf_counter() - start, sum(conn.seconds.values())

    def rota() -> Split:
        store = SQLiteStore(path)
        conn = TimedConnection(store._writer)
        store._writer = cast(apsw.Connection, conn)

        def body() -> None:
            for new in events:
                store.append([new])

        split = measure(conn, body)
        store.close()
        return split

    def flat() -> Split:
        conn = TimedConnection(raw_connect(path))

        def body() -> None:
            for new in events:
                flat_append(cast(apsw.Connection, conn), new)

        split = measure(conn, body)
        conn.close()
        return split

    def raw() -> Split:
        conn, rows = TimedConnection(raw_connect(path)), raw_rows(events)

        def body() -> None:
            for row in rows:
                raw_append(cast(apsw.Connection, conn), [row])

        split = measure(conn, body)
        conn.close()
        return split

    cases: dict[str, Callable[[], Split]] = {
        "rota SQLiteStore.append": rota,
        "flat, same SQL and hashing": flat,
        "raw apsw": raw,
    }
    totals: dict[str, float] = {}
    rests: dict[str, float] = {}
    for _ in range(repeats):
        for name, run in cases.items():
            remove_db(path)
            seconds, locked = run()
            totals[name] = min(totals.get(name, float("inf")), seconds / total * 1e6)
            rests[name] = min(rests.get(name, float("inf")), (seconds - locked) / total * 1e6)
            remove_db(path)
    print(f"## one-event transactions, {total:,} (best of {repeats}, synchronous FULL)")
    print("(the disk's commit time swings from run to run; the time outside BEGIN and COMMIT")
    print(" is the steadier measure of what each adds)")
    print()
    rows = [
        [n, f"{totals[n]:.0f}", f"{totals['raw apsw'] / totals[n]:.2f}", f"{rests[n]:.0f}"]
        for n in cases
    ]
    print_table(["case", "us/txn", "vs raw", "us/txn outside BEGIN/COMMIT"], rows)
    print()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.whatif", description=__doc__)
    parser.add_argument("--read", type=int, default=200_000, help="events in the read log")
    parser.add_argument("--single", type=int, default=3_000, help="one-event appends")
    run_options(parser, quick="a small run")
    args = parser.parse_args(argv)
    if args.quick:
        args.read, args.single = 20_000, 500
    with workdir(args.dir) as directory:
        print_header("what-if experiments", directory)
        read_whatif(directory, args.read, args.repeats)
        append_whatif(directory, args.single, args.repeats)


if __name__ == "__main__":
    main()
