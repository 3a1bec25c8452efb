"""Audit: prove the log was not altered, reordered, or cut in the middle.

`verify_chain` walks the log in position order and checks, for every row:
- positions run 1, 2, 3 ... with no gap (a deleted row shows as the missing position);
- the stored hash equals SHA-256(previous hash || canonical envelope) (an edited column,
  an inserted row, or rows swapped show at the first position whose link breaks);
- each stream's versions run 1, 2, 3 ... in position order.
It returns a `ChainReport` naming the first bad position and why; it never raises for a bad
log (only for an unreadable store). Truncation of the tail is invisible to the chain
alone; only a checkpoint (position, hash) kept outside the store reveals it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import msgspec

from rota.infrastructure.chain import GENESIS, canonical_envelope, link
from rota.infrastructure.store import EventStore, RawRecord


class ChainReport(msgspec.Struct, frozen=True):
    """The verdict on a log: `ok`, how many rows were checked, and the first problem."""

    ok: bool
    checked: int
    head_position: int
    head_hash: str
    first_bad_position: int | None = None
    reason: str | None = None


def iter_raw(store: EventStore, page: int = 5000, after: int = 0) -> Iterator[RawRecord]:
    """Every stored row after `after`, in position order, read in pages."""
    position = after
    while True:
        batch = store.read_raw(position, page)
        if not batch:
            return
        yield from batch
        position = batch[-1].position


def verify_records(
    records: Iterable[RawRecord],
    *,
    progress: Callable[[int], None] | None = None,
) -> ChainReport:
    """Verify a sequence of rows that starts at position 1."""
    previous = GENESIS
    expected_position = 1
    stream_versions: dict[str, int] = {}
    checked = 0
    for record in records:
        if record.position != expected_position:
            if record.position > expected_position:
                why = f"position {expected_position} is missing (next row is {record.position})"
            else:
                why = (
                    f"position {record.position} appears out of order after {expected_position - 1}"
                )
            return _bad(checked, expected_position - 1, previous, expected_position, why)
        computed = link(
            previous,
            canonical_envelope(
                record.position,
                record.stream,
                record.version,
                record.type,
                record.type_version,
                record.delivery_id,
                record.recorded_at,
                record.data,
            ),
        )
        if computed.hex() != record.hash:
            return _bad(
                checked,
                record.position - 1,
                previous,
                record.position,
                "stored hash does not match the row's content and the previous hash "
                "(the row was edited, inserted, or moved)",
            )
        last = stream_versions.get(record.stream)
        first_allowed = (0, 1) if record.type_version == 0 else (1,)
        if (last is None and record.version not in first_allowed) or (
            last is not None and record.version != last + 1
        ):
            want = "1" if last is None else str(last + 1)
            return _bad(
                checked,
                record.position - 1,
                previous,
                record.position,
                f"stream {record.stream!r} jumps to version {record.version}, expected {want}",
            )
        stream_versions[record.stream] = record.version
        previous = computed
        expected_position += 1
        checked += 1
        if progress is not None and checked % 10_000 == 0:
            progress(checked)
    return ChainReport(True, checked, expected_position - 1, previous.hex())


def verify_chain(
    store: EventStore, *, progress: Callable[[int], None] | None = None
) -> ChainReport:
    """Verify the whole log of a store."""
    return verify_records(iter_raw(store), progress=progress)


def _bad(checked: int, head: int, previous: bytes, position: int, reason: str) -> ChainReport:
    return ChainReport(False, checked, head, previous.hex(), position, reason)
