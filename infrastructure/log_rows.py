"""The rows an append hands to a log store before the log places them, and their chaining.

`Row` is one event encoded, before its position, time and hash are known; `chain_values`
gives each row of an append its position and its hash, linked from the log's head (the
chain itself is `chain`'s), exactly as every store records them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from rota.application.ports import NewEvent, RecordedEvent
from rota.domain.events import Event
from rota.infrastructure.chain import encode_header
from rota.infrastructure.codec import Codec

# The `rota_meta` key an unfinished import leaves in a store (`EventStore.mark_import`).
IMPORTING = "import_incomplete"


class Row:
    """One event about to be written, before its position, time and hash are known."""

    __slots__ = (
        "data", "delivery_id", "event", "payload", "stream", "type", "type_version", "version",
    )  # fmt: skip

    def __init__(
        self,
        stream: str,
        version: int | None,
        type_: str,
        type_version: int,
        delivery_id: str | None,
        data: str | bytes,
        payload: bytes | None = None,
        event: Event | None = None,
    ) -> None:
        self.stream = stream
        self.version = version
        self.type = type_
        self.type_version = type_version
        self.delivery_id = delivery_id
        self.data = data
        # `data` as bytes, when the caller has them (the encoder's output): what the chain
        # hashes, so it is not encoded again.
        self.payload = payload
        # The event `data` encodes, when the caller has it: handed back by the append in
        # place of decoding `data` again, when it is canonical (`recorded_events`).
        self.event = event


def prepared_rows(codec: Codec, events: Sequence[NewEvent]) -> list[tuple[NewEvent, Row]]:
    """Each event of an append encoded into a row (its version left for the store to set),
    beside the event it came from: what every store's append writes."""
    encoded = codec.encode_many([new.event for new in events])
    return [
        (new, Row(
            new.stream, None, tag, version, new.delivery_id, payload.decode(), payload,
            new.event,
        ))
        for new, (tag, version, payload) in zip(events, encoded, strict=True)
    ]  # fmt: skip


def chain_values(
    rows: Sequence[Row], position: int, previous: bytes, recorded_at: str
) -> tuple[list[Any], bytes]:
    """The rows (their versions set), positioned after `position` and chained from
    `previous`, as one flat run of the log's nine columns a row (`COLUMNS` order, the hash
    in hex); and the last row's hash.

    The same hash as `link_event` of each row, computed in one loop: no call, key tuple or
    generator step an event (an append writes hundreds). Both stores' appends chain through
    it."""
    header, sha256 = encode_header, hashlib.sha256
    values: list[Any] = []
    extend = values.extend
    for row in rows:
        position += 1
        version = row.version
        assert version is not None
        stream, type_, type_version, delivery_id = (
            row.stream, row.type, row.type_version, row.delivery_id
        )  # fmt: skip
        previous = sha256(
            b"".join((
                previous,
                header([position, stream, version, type_, type_version, delivery_id, recorded_at]),
                b"\n",
                row.payload or payload_of(row),
            ))
        ).digest()  # fmt: skip
        extend((
            position, stream, version, type_, type_version, delivery_id, row.data, recorded_at,
            previous.hex(),
        ))  # fmt: skip
    return values, previous


# (position, row, recorded_at): a row an append wrote, before it is returned as recorded.
Written = tuple[int, Row, str]


def recorded_events(
    codec: Codec, entries: Sequence[RecordedEvent | Written]
) -> list[RecordedEvent]:
    """What an append returns for `entries`, exactly as a later read or replay sees them: an
    original (a duplicate delivery) as it is; a row the append wrote with the event it was
    given, when that is canonical (`Codec.canonical`: what decoding the row gives back),
    else with the event decoded from the row (all such rows in one decoder call). Every
    store's append hands its results back through it, outside its write lock."""
    checks = codec.checks  # (`Codec.canonical`, one call less an event)
    recorded: list[Any] = []
    others: list[tuple[int, int, Row, str]] = []  # (index in recorded, position, row, at)
    for entry in entries:
        if type(entry) is not tuple:
            recorded.append(entry)
            continue
        position, row, recorded_at = entry
        event = row.event
        if event is not None and checks[type(event)](event):
            recorded.append(
                RecordedEvent(
                    position, row.stream, row.version or 0, row.delivery_id, recorded_at, event
                )
            )
        else:
            others.append((len(recorded), position, row, recorded_at))
            recorded.append(None)
    if others:
        decoded = codec.decode_written(
            [(row.type, row.type_version, payload_of(row), at) for _, at, row, _ in others]
        )
        for (index, position, row, recorded_at), event in zip(others, decoded, strict=True):
            recorded[index] = RecordedEvent(
                position, row.stream, row.version or 0, row.delivery_id, recorded_at, event
            )
    return recorded


def payload_of(row: Row) -> bytes:
    """The row's payload as bytes (the encoder's own, when it kept them)."""
    if row.payload is not None:
        return row.payload
    data = row.data
    return data.encode() if isinstance(data, str) else bytes(data)
