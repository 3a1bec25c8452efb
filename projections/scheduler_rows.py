"""The scheduler projection's persisted form: its row keys, each row's encoding, and rows
decoded back.

The state splits into rows, one per Work (`work/<id>`, lean: see `rota.projections.work_rows`),
one per distinct pinned binding (`binding/<digest>`), one per ledger (`ledger/<json key>`) and
per budget notice sent (`notified/<identity>`), a few singletons (`SINGLETONS`) and
`active` (the Works some index names). `SchedulerProjection.row`, `row_keys` and
`from_rows` are these functions; none of this takes part in the fold (`digest()` hashes the
Work rows: the lean encoding is canonical).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from rota.domain.events.admission import Budget
from rota.domain.flow import Fairness
from rota.domain.state import WorkState
from rota.projections.flow_index import FlowState
from rota.projections.work_rows import BINDING_ROW, WorkCodec, canonical_encoder

if TYPE_CHECKING:
    from rota.projections.scheduler import SchedulerProjection


# Row keys (see the module docstring).
WORK_ROW = "work/"
LEDGER_ROW = "ledger/"
NOTIFIED_ROW = "notified/"
ACTIVE_ROW = "active"  # the sorted ids of the Works some index names
Staged = dict[int, tuple[str, str, dict[str, float], datetime]]
SINGLETONS: dict[str, Any] = {
    "pool_versions": dict[str, int],
    "scope_versions": dict[str, int],
    "budgets": tuple[Budget, ...],
    "staged": Staged,
    "ledger_version": int,
    "turns": int,
    "flow": FlowState,
    "fair": Fairness,
}
_ledger_key_decoder = msgspec.json.Decoder(tuple[str, str, str])
_float_decoder = msgspec.json.Decoder(float)
_singleton_decoders = {name: msgspec.json.Decoder(kind) for name, kind in SINGLETONS.items()}


def ledger_row(key: tuple[str, str, str]) -> str:
    """The row key of one ledger: `ledger/["budget","ledger","window"]`."""
    return LEDGER_ROW + canonical_encoder.encode(list(key)).decode()


def encode_row(projection: SchedulerProjection, key: str) -> bytes | None:
    """The encoded value of one persisted row (None: the row does not exist)."""
    if key.startswith(WORK_ROW):
        work = projection.works.get(key[len(WORK_ROW) :])
        return None if work is None else projection.codec.encode(work)
    if key.startswith(BINDING_ROW):
        return projection.codec.binding_row(key)
    if key.startswith(LEDGER_ROW):
        ledger = _ledger_key_decoder.decode(key[len(LEDGER_ROW) :])
        amount = projection.ledgers.get(ledger)
        return None if amount is None else canonical_encoder.encode(amount)
    if key.startswith(NOTIFIED_ROW):
        return b"true" if key[len(NOTIFIED_ROW) :] in projection.notified else None
    if key in SINGLETONS:
        return canonical_encoder.encode(getattr(projection, key))
    if key == ACTIVE_ROW:
        return canonical_encoder.encode(sorted(projection.active_works()))
    raise KeyError(f"no row {key!r} in the scheduler projection")


def persisted_keys(projection: SchedulerProjection) -> Iterator[str]:
    """Every persisted row key, in no particular order."""
    works = projection.works
    for work_id in works:
        yield WORK_ROW + work_id
    # The bindings the Works pin, known before any row is encoded (a caller may list every
    # key first).
    projection.codec.learn_works(works.values())
    yield from other_keys(projection)


def other_keys(projection: SchedulerProjection) -> Iterator[str]:
    """Every persisted row key but the Works', in no particular order."""
    yield from SINGLETONS
    yield ACTIVE_ROW
    for ledger in projection.ledgers:
        yield ledger_row(ledger)
    for notice in projection.notified:
        yield NOTIFIED_ROW + notice
    for digest in projection.codec.bindings:
        yield BINDING_ROW + digest


def decode_rows(rows: Iterable[tuple[str, bytes]]) -> tuple[list[WorkState], dict[str, Any]]:
    """Decode persisted rows (as `encode_row` encodes them): the Works, and the other
    fields `SchedulerProjection.restore` takes (`codec`: the bindings read)."""
    works: list[WorkState] = []
    work_rows: list[bytes] = []
    codec = WorkCodec()
    ledgers: dict[tuple[str, str, str], float] = {}
    notified: set[str] = set()
    fields: dict[str, Any] = {}
    for key, value in rows:
        if key.startswith(WORK_ROW):
            work_rows.append(value)
        elif key.startswith(BINDING_ROW):
            codec.learn(key, value)
        elif key.startswith(LEDGER_ROW):
            ledger = _ledger_key_decoder.decode(key[len(LEDGER_ROW) :])
            ledgers[ledger] = _float_decoder.decode(value)
        elif key.startswith(NOTIFIED_ROW):
            notified.add(key[len(NOTIFIED_ROW) :])
        elif key in _singleton_decoders:
            fields[key] = _singleton_decoders[key].decode(value)
        elif key != ACTIVE_ROW:  # derived from the Works; read when opened with quiet Works
            raise KeyError(f"no row {key!r} in the scheduler projection")
    # The Works last: their rows name bindings that may come in any order.
    works = [codec.decode(value) for value in work_rows]
    fields["ledgers"] = ledgers
    fields["notified"] = notified
    fields["codec"] = codec
    return works, fields
