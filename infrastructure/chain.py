"""The hash chain that makes the log tamper-evident.

Each recorded event carries `hash = SHA-256(previous hash || canonical envelope)`, where the
canonical envelope is the JSON array `[position, stream, version, type, type_version,
delivery_id, recorded_at]`, a newline, then the payload bytes exactly as stored (UTF-8 for a
text payload). The first event's previous hash is 32 zero bytes. Editing any column of any
row, deleting or inserting a row in the middle, or reordering rows breaks every later link;
truncating the tail is caught only against a checkpoint kept outside the store.
"""

from __future__ import annotations

import hashlib

import msgspec

GENESIS = bytes(32)
GENESIS_HEX = GENESIS.hex()

_header = msgspec.json.Encoder()


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
    payload = data.encode() if isinstance(data, str) else bytes(data)
    header = _header.encode(
        [position, stream, version, type_, type_version, delivery_id, recorded_at]
    )
    return header + b"\n" + payload


def link(previous: bytes, envelope: bytes) -> bytes:
    """The next hash of the chain."""
    return hashlib.sha256(previous + envelope).digest()
