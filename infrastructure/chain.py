"""The hash chain that makes the log tamper-evident.

Each recorded event carries `hash = SHA-256(previous hash || canonical envelope)`, where the
canonical envelope is the JSON array `[position, stream, version, type, type_version,
delivery_id, recorded_at]`, a newline, then the payload bytes exactly as stored (UTF-8 for a
text payload). The first event's previous hash is 32 zero bytes. Editing any column of any
row, deleting or inserting a row in the middle, or reordering rows breaks every later link;
truncating the tail is caught only against a checkpoint kept outside the store.

The one exception is a payload a retention prune rewrote (`PRUNED_MARKER` opens it): its
row keeps its hash, which its content no longer gives; `rota audit verify` judges it by the
Merkle root the prune recorded (`rota.replay.retention_audit`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

import msgspec

from rota.application.errors import PortCode, StoreError

GENESIS = bytes(32)
GENESIS_HEX = GENESIS.hex()
# How a pruned payload opens (`rota.infrastructure.retention_summary`); every payload rota
# writes opens `{"type":`, so no other payload does.
PRUNED_MARKER = b'{"$pruned":true,'
_PRUNED_TEXT = PRUNED_MARKER.decode()


def is_pruned(data: bytes | str) -> bool:
    """Whether a stored payload is a retention summary."""
    if isinstance(data, str):
        return data.startswith(_PRUNED_TEXT)
    return bytes(data[: len(PRUNED_MARKER)]) == PRUNED_MARKER


_header = msgspec.json.Encoder()
_sha256 = hashlib.sha256
# The envelope's header line from `[position, stream, version, type, type_version,
# delivery_id, recorded_at]` (as `canonical_envelope` encodes it).
encode_header = _header.encode


def canonical_envelope(
    position: int,
    stream: str,
    version: int,
    type_: str,
    type_version: int,
    delivery_id: str | None,
    recorded_at: str,
    data: bytes | str,
) -> bytes:
    """The exact bytes the chain hashes for one event."""
    payload = data.encode() if isinstance(data, str) else data
    header = _header.encode(
        [position, stream, version, type_, type_version, delivery_id, recorded_at]
    )
    return b"".join((header, b"\n", payload))


def link(previous: bytes, envelope: bytes) -> bytes:
    """The next hash of the chain."""
    return hashlib.sha256(previous + envelope).digest()


def link_event(
    previous: bytes,
    position: int,
    stream: str,
    version: int,
    type_: str,
    type_version: int,
    delivery_id: str | None,
    recorded_at: str,
    payload: bytes,
) -> bytes:
    """`link(previous, canonical_envelope(...))` for a payload already in bytes, in one
    hash call: the appends chain every event they write through it."""
    envelope = canonical_envelope(
        position, stream, version, type_, type_version, delivery_id, recorded_at, payload
    )
    return _sha256(previous + envelope).digest()


class Row(Protocol):
    """Anything shaped like a stored row (`RawRecord`, an export line).

    Read-only members, so a frozen row (`RawRecord` is a frozen Struct) matches too.
    """

    @property
    def position(self) -> int: ...
    @property
    def stream(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def type_version(self) -> int: ...
    @property
    def delivery_id(self) -> str | None: ...
    @property
    def recorded_at(self) -> str: ...
    @property
    def data(self) -> bytes | str: ...


def row_envelope(row: Row) -> bytes:
    """The canonical envelope of a stored row (what its hash covers after the previous)."""
    return canonical_envelope(
        row.position,
        row.stream,
        row.version,
        row.type,
        row.type_version,
        row.delivery_id,
        row.recorded_at,
        row.data,
    )


def link_row(previous: bytes, row: Row) -> bytes:
    """The hash a stored row must carry, given the previous row's hash."""
    return link(previous, row_envelope(row))


class StoredRow(Row, Protocol):
    @property
    def hash(self) -> str: ...


def check_continuation(position: int, head_hash: str | None, rows: Sequence[StoredRow]) -> None:
    """Refuse (`import_mismatch`) rows that do not continue a log whose head is `position`
    with hash `head_hash` (None: an empty log): positions must follow on and every hash must
    link. Stores call it before importing anything, so an import writes all or nothing.

    A pruned row's hash cannot be recomputed: it is taken as stored (the next row must link
    to it), and judged by `rota audit verify` against the prune's recorded root; `rota
    import` verifies the whole export that way before it writes anything."""
    previous = GENESIS
    if head_hash is not None:
        try:
            previous = bytes.fromhex(head_hash)
        except ValueError:
            raise StoreError(
                f"cannot import after position {position}: its stored hash is not hex",
                code=PortCode.IMPORT_MISMATCH,
            ) from None
    for row in rows:
        if row.position != position + 1:
            raise StoreError(
                f"cannot import position {row.position}: the log's head is {position}, "
                f"so the next position must be {position + 1}",
                code=PortCode.IMPORT_MISMATCH,
            )
        computed = bytes.fromhex(row.hash) if is_pruned(row.data) else link_row(previous, row)
        if computed.hex() != row.hash:
            raise StoreError(
                f"cannot import position {row.position}: its hash does not match its "
                "content and the previous hash (edited, or not the next row of this log)",
                code=PortCode.IMPORT_MISMATCH,
            )
        position, previous = row.position, computed
