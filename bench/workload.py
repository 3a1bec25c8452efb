"""The benchmark workload and the three writers/readers compared.

Events come in pairs on their own stream `work/w-<k>`: a `WorkSubmitted` (version 1), then an
`InputAccepted` (version 2) with a delivery identity `input/w-<k>/k-<k>`, both with a small,
realistic payload (about 200 bytes of JSON).

- rota: `SQLiteStore` (WAL, synchronous FULL, BEGIN IMMEDIATE, chained SHA-256 hashes).
- raw apsw: the same `events` table (rota's own SCHEMA), the same rows (same JSON text, a
  constant 64-hex hash), WAL, synchronous FULL, `BEGIN IMMEDIATE ... COMMIT`: the floor.
- eventsourcing: the stock `eventsourcing.sqlite` application recorder (stdlib sqlite3, WAL,
  synchronous left at SQLite's default, FULL here), `StoredEvent`s whose state is what the
  stock mapper would write for the same event (its fields and a timestamp, JSONTranscoder).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Union
from uuid import NAMESPACE_URL, UUID, uuid5

import apsw
import msgspec
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    InfrastructureFactory,
    JSONTranscoder,
    StoredEvent,
    UUIDAsHex,
)

from rota.application.ports import NewEvent
from rota.application.timestamps import format_timestamp
from rota.domain.events import ALL_EVENTS, Event, InputAccepted, WorkSubmitted
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.sqlite.log_file import SCHEMA

RAW_HASH = "ab" * 32
RAW_COLUMNS = "position, stream, version, type, type_version, delivery_id, data, recorded_at, hash"
RAW_INSERT = f"INSERT INTO events ({RAW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
RAW_PAGE = (
    "SELECT position, stream, version, type, type_version, delivery_id, data, recorded_at "
    "FROM events WHERE position > ? ORDER BY position LIMIT ?"
)

EVENT_UNION: Any = Union[ALL_EVENTS]  # noqa: UP007  (what rota's codec decodes to)

RawRow = tuple[int, str, int, str, int, str | None, str, str, str]


def _event(cls: type[Event], **fields: Any) -> Event:
    """An event of `cls` from the fields it declares (the shapes are still moving)."""
    known = set(cls.__struct_fields__)
    return cls(**{name: value for name, value in fields.items() if name in known})


def new_events(count: int) -> list[NewEvent]:
    """`count` events: WorkSubmitted and InputAccepted alternating, a stream per pair."""
    events: list[NewEvent] = []
    for index in range(count):
        k = index // 2
        work_id = f"w-{k:07d}"
        stream = f"work/{work_id}"
        if index % 2 == 0:
            submitted = _event(
                WorkSubmitted,
                work_id=work_id,
                scope=f"team-{k % 7}/reports",
                binding="shell:/opt/jobs/report.sh --date {date} --region {region}",
                kind="standing" if k % 3 == 0 else "run-once",
                safety="idempotent",
            )
            events.append(NewEvent(stream, submitted))
        else:
            key = f"k-{k:07d}"
            accepted = _event(
                InputAccepted,
                work_id=work_id,
                sequence=1,
                key=key,
                payload={"date": "2026-11-29", "region": "eu-west-1", "rows": k % 5000},
                correlation_key=f"corr-{k:07d}",
            )
            events.append(NewEvent(stream, accepted, delivery_id=f"input/{work_id}/{key}"))
    return events


def batches(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


# -- raw apsw -------------------------------------------------------------------------------


def raw_rows(events: Sequence[NewEvent]) -> list[RawRow]:
    """The rows rota would write for `events` on a fresh log, with a constant hash."""
    recorded_at = format_timestamp(datetime.now(UTC))
    rows: list[RawRow] = []
    for position, new in enumerate(events, start=1):
        tag, type_version, payload = DEFAULT_CODEC.encode(new.event)
        version = 1 if isinstance(new.event, WorkSubmitted) else 2
        rows.append(
            (
                position,
                new.stream,
                version,
                tag,
                type_version,
                new.delivery_id,
                payload.decode(),
                recorded_at,
                RAW_HASH,
            )
        )
    return rows


def raw_connect(path: Path) -> apsw.Connection:
    """A connection set up like rota's writer: WAL, synchronous FULL, rota's schema."""
    conn = apsw.Connection(str(path))
    conn.setbusytimeout(30_000)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(SCHEMA)
    return conn


def raw_append(conn: apsw.Connection, rows: Sequence[RawRow]) -> None:
    """One durable transaction inserting `rows`."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(RAW_INSERT, rows)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# -- eventsourcing --------------------------------------------------------------------------


def es_transcoder() -> JSONTranscoder:
    """The transcoder an eventsourcing `Application` registers by default."""
    transcoder = JSONTranscoder()
    transcoder.register(UUIDAsHex())
    transcoder.register(DecimalAsStr())
    transcoder.register(DatetimeAsISO())
    return transcoder


def es_recorder(path: Path) -> tuple[Any, Any]:
    """(factory, application recorder) of the stock SQLite module on `path`."""
    factory = InfrastructureFactory.construct(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    )
    return factory, factory.application_recorder()


class EsEvent(msgspec.Struct, frozen=True):
    """What the stock mapper starts from: id, version, topic and the state to transcode."""

    originator_id: UUID
    originator_version: int
    topic: str
    state: dict[str, Any]


def es_events(events: Sequence[NewEvent]) -> list[EsEvent]:
    """The eventsourcing counterpart of each rota event (UUID id from the stream name)."""
    now = datetime.now(UTC)
    out: list[EsEvent] = []
    for new in events:
        cls = type(new.event)
        state = msgspec.structs.asdict(new.event)
        state["timestamp"] = now
        out.append(
            EsEvent(
                uuid5(NAMESPACE_URL, new.stream),
                1 if isinstance(new.event, WorkSubmitted) else 2,
                f"{cls.__module__}:{cls.__qualname__}",
                state,
            )
        )
    return out


def es_stored(transcoder: JSONTranscoder, events: Sequence[EsEvent]) -> list[StoredEvent]:
    """The mapper's work: transcode each state to JSON bytes and wrap it in a StoredEvent."""
    encode = transcoder.encode
    return [
        StoredEvent(
            originator_id=e.originator_id,
            originator_version=e.originator_version,
            topic=e.topic,
            state=encode(e.state),
        )
        for e in events
    ]


def es_synchronous(recorder: Any) -> int:
    """The effective `PRAGMA synchronous` of the recorder's connections (2 is FULL)."""
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])
