"""Optimisation: verify and doctor compare projections in memory bounded by the active
Works, not holding both whole (bench check_memory).

Stored and folded projections read as row streams in key order, in memory bounded by the
active Works: their digests, their first difference, and the state the checks need.

`rota replay verify` and `rota doctor` compare each stored projection with a fresh fold of
the log, and neither holds either one whole. The fold spills as a rebuild's does
(`rota.infrastructure.spill`), so its rows come back in key order from its spill file; the
stored rows stream in key order from the projection store (`ProjectionStore.sorted_rows`,
inside one `snapshot()`). Here:
- `read_scheduler` and `read_history` decode a stream row by row as the projection's
  `from_rows` would, take each row's canonical value (what the decoded projection's `row()`
  gives: the Work decoded and encoded again) and digest them as they go, so the digest is
  `from_rows(...).digest()` without the projection. The first row that cannot be decoded is
  named (a Work row names its binding by digest: `binding/` rows sort before `work/` rows,
  so a damaged binding is met, and named, before the Works that name it).
- `read_scheduler` keeps, of the Works, those some index names or a hold names: restored
  alone (`SchedulerProjection.restore`) they give the very indices, holds and ledgers of
  the whole projection (a Work that is quiet names no index: `is_quiet`), which is all the
  derived projections (`DERIVED`) and doctor's state checks read. It also returns every
  distinct pinned binding (one `binding/` row each), what doctor's capacity check names.
- `first_mismatch` merge-walks two streams in key order to their first differing row;
  `canonical_rows` is a stored stream as the decoded projection's rows (for that walk).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from rota.domain.policy import Pinned
from rota.domain.state import WorkState
from rota.projections.held_works import is_quiet
from rota.projections.history import HistoryProjection
from rota.projections.history_attempts import ATTEMPT_ROW
from rota.projections.records import AttemptHistory, WorkHistory, encoder
from rota.projections.scheduler import ACTIVE_ROW, WORK_ROW, SchedulerProjection
from rota.projections.scheduler_rows import LEDGER_ROW, NOTIFIED_ROW, SINGLETONS
from rota.projections.work_rows import BINDING_ROW, WorkCodec

Rows = Iterable[tuple[str, bytes]]
# What a row that cannot be decoded raises (as `from_rows` does).
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, KeyError, ValueError)
_ids = msgspec.json.Decoder(list[str])
_ledger_key = msgspec.json.Decoder(tuple[str, str, str])
_float = msgspec.json.Decoder(float)
_singletons = {name: msgspec.json.Decoder(kind) for name, kind in SINGLETONS.items()}
_pinned = msgspec.json.Decoder(Pinned)
_work_history = msgspec.json.Decoder(WorkHistory)
_attempt_history = msgspec.json.Decoder(AttemptHistory)
# The rows a decoded scheduler projection always has, stored or not (`persisted_keys`).
_ALWAYS = sorted((*SINGLETONS, ACTIVE_ROW))


class _Holds(msgspec.Struct):
    """Whether a lean Work row names a hold (an empty one is left out of the row)."""

    holds: tuple[msgspec.Raw, ...] = ()


_holds = msgspec.json.Decoder(_Holds)


class Reading:
    """What reading one projection's row stream found: its `digest` (None: not taken), or
    the `bad_key` and `error` of the first row that cannot be decoded (`decoded` False)."""

    def __init__(self) -> None:
        self.digest: str | None = None
        self.decoded = True
        self.bad_key: str | None = None
        self.error: Exception | None = None

    def failed(self, key: str | None, error: Exception) -> None:
        self.decoded, self.bad_key, self.error = False, key, error


class SchedulerReading(Reading):
    """A scheduler row stream read: besides the digest, `projection` (the Works some index
    or hold names, every other field whole) and `pinned` (every distinct pinned binding)."""

    def __init__(self, position: int) -> None:
        super().__init__()
        self.projection = SchedulerProjection()
        self.projection.position = position
        self.pinned: list[Pinned] = []


def read_scheduler(position: int, rows: Rows, *, trusted: bool = False) -> SchedulerReading:
    """Read a scheduler projection's rows (key order) at `position`; see the module docstring.

    `trusted`: the rows are a fold's own (a spill file): its `active` row names the active
    Works, so only those and the held ones are decoded, and no digest is taken (the fold
    has its own). Else every row is decoded as `from_rows` would (the `active` row is
    derived, so not read) and the digest is `from_rows(position, rows).digest()`."""
    reading = SchedulerReading(position)
    codec = WorkCodec()
    fields: dict[str, Any] = {"codec": codec, "ledgers": {}, "notified": set()}
    kept: list[WorkState] = []
    active: set[str] = set()

    def works() -> Iterator[bytes]:
        for key, value in rows:
            try:
                if key.startswith(WORK_ROW):
                    if not trusted:
                        work = codec.decode(value)
                        if work.holds or not is_quiet(work):
                            kept.append(work)
                        yield codec.encode(work)
                    elif key[len(WORK_ROW) :] in active or _holds.decode(value).holds:
                        kept.append(codec.decode(value))
                elif key.startswith(BINDING_ROW):
                    codec.learn(key, value)
                    reading.pinned.append(_pinned.decode(value))
                elif key.startswith(LEDGER_ROW):
                    fields["ledgers"][_ledger_key.decode(key[len(LEDGER_ROW) :])] = _float.decode(
                        value
                    )
                elif key.startswith(NOTIFIED_ROW):
                    fields["notified"].add(key[len(NOTIFIED_ROW) :])
                elif key in _singletons:
                    fields[key] = _singletons[key].decode(value)
                elif key == ACTIVE_ROW:
                    if trusted:
                        active.update(_ids.decode(value))
                else:
                    raise KeyError(f"no row {key!r} in the scheduler projection")
            except DECODE_ERRORS as exc:
                reading.failed(key, exc)
                return
        # `digest_of` hashes the Works it is handed first, then these fields: every row has
        # been read by now, whatever its key.
        for name, value in fields.items():
            setattr(reading.projection, name, value)

    if trusted:
        for _ in works():
            pass
    else:
        digest = reading.projection.digest_of(works())
        if reading.decoded:
            reading.digest = digest
    if reading.decoded:
        try:
            reading.projection = SchedulerProjection.restore(position, kept, fields)
        except DECODE_ERRORS as exc:
            reading.failed(None, exc)
    return reading


def read_history(position: int, rows: Rows) -> Reading:
    """Read a history projection's rows (key order) at `position`: each decoded and encoded
    again, digested as `from_rows(position, rows).digest()` would be."""
    reading = Reading()
    digest = HistoryProjection.digest_rows(_canonical_history(rows, reading), position)
    if reading.decoded:
        reading.digest = digest
    return reading


def _canonical_history(rows: Rows, reading: Reading | None = None) -> Iterator[tuple[str, bytes]]:
    for key, value in rows:
        try:
            if key.startswith(WORK_ROW):
                yield key, encoder.encode(_work_history.decode(value))
            elif key.startswith(ATTEMPT_ROW):
                yield key, encoder.encode(_attempt_history.decode(value))
            else:
                raise KeyError(f"no row {key!r} in the history projection")
        except DECODE_ERRORS as exc:
            if reading is None:
                raise
            reading.failed(key, exc)
            return


def read_rows(kind: Any, position: int, rows: Rows) -> Reading:
    """`read_scheduler` or `read_history`, by the projection `kind`."""
    if kind is SchedulerProjection:
        return read_scheduler(position, rows)
    return read_history(position, rows)


def canonical_rows(kind: Any, reading: Reading, rows: Rows) -> Iterator[tuple[str, bytes]]:
    """The stored `rows` (key order, read whole without an error: `reading`) as the rows of
    the projection they decode to: each Work (history: each row) decoded and encoded again;
    the scheduler's other rows, and those it has whether stored or not (its singletons,
    `active`), as the decoded projection gives them."""
    if kind is not SchedulerProjection:
        yield from _canonical_history(rows)
        return
    assert isinstance(reading, SchedulerReading)
    projection = reading.projection
    codec = projection.codec
    always = iter(_ALWAYS)
    pending = next(always, None)
    for key, value in rows:
        while pending is not None and pending < key:
            yield pending, projection.row(pending) or b""
            pending = next(always, None)
        if key == pending:
            pending = next(always, None)
        if key.startswith(WORK_ROW):
            yield key, codec.encode(codec.decode(value))
        else:
            yield key, projection.row(key) or b""
    while pending is not None:
        yield pending, projection.row(pending) or b""
        pending = next(always, None)


@contextlib.contextmanager
def opened(rows: Iterable[tuple[str, bytes]]) -> Iterator[Iterator[tuple[str, bytes]]]:
    """`rows` as an iterator, closed after use when it can be (a stream that holds a read
    transaction or a cursor until it ends)."""
    found = iter(rows)
    try:
        yield found
    finally:
        close = getattr(found, "close", None)
        if close is not None:
            close()


def first_mismatch(left: Rows, right: Rows) -> tuple[str, bytes | None, bytes | None] | None:
    """The first row (key order) where two streams of rows (key order) differ: its key and
    each side's value (None: that side has no such row); None when they are equal."""
    ours, theirs = iter(left), iter(right)
    a, b = next(ours, None), next(theirs, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            assert a is not None
            return a[0], a[1], None
        if a is None or b[0] < a[0]:
            return b[0], None, b[1]
        if a[1] != b[1]:
            return a[0], a[1], b[1]
        a, b = next(ours, None), next(theirs, None)
    return None


__all__ = [
    "DECODE_ERRORS",
    "Reading",
    "SchedulerReading",
    "canonical_rows",
    "first_mismatch",
    "opened",
    "read_history",
    "read_rows",
    "read_scheduler",
]
