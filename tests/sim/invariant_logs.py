"""Real logs for the invariant tests, and minimal tampering of them.

The golden histories (`tests/histories/*.jsonl`, real scenarios rota wrote) are read as
(event, row) pairs with the settings they were written under. Tampering keeps every
position a payload refers to: an event's fields are altered in place (`alter`), the log is
cut after a position (`upto`), or forged events are appended at its end with the next
position and their stream's next version (`forge`).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from rota.application.ports import RawRecord, RecordedEvent
from rota.domain.events import Event
from rota.domain.policy import Settings
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.config import Config
from rota.replay.export import open_export, read_header, read_records
from rota.testing.sim.invariants import Checker, Violation

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
EXPECTED: dict[str, Any] = json.loads((HISTORIES / "expected.json").read_text("utf-8"))
NAMES = [*sorted(EXPECTED["histories"]), "divergent"]

Log = list[RecordedEvent]


@cache
def rows(name: str) -> tuple[tuple[RecordedEvent, RawRecord], ...]:
    """The history `name` as (event, stored row) pairs, in position order."""
    found = []
    with open_export(HISTORIES / f"{name}.jsonl") as src:
        for row in read_records(src, read_header(src)):
            event = DEFAULT_CODEC.decode(row.type, row.type_version, row.data, row.position)
            recorded = RecordedEvent(
                row.position, row.stream, row.version, row.delivery_id, row.recorded_at, event
            )
            found.append((recorded, row))
    return tuple(found)


def history(name: str) -> Log:
    """The events of history `name`."""
    return [event for event, _ in rows(name)]


def settings(name: str) -> Settings:
    """The settings history `name` was written under."""
    entry = EXPECTED["divergent"] if name == "divergent" else EXPECTED["histories"][name]
    return Config.parse(entry["config"]).settings


def check(log: Log, name: str) -> list[Violation]:
    """Every violation in `log` (events only: tampering does not re-chain the rows)."""
    return Checker(settings(name), chain=False).observe_all(log)


def find(log: Log, kind: type[Event], **fields: Any) -> RecordedEvent:
    """The first event of `kind` whose fields equal `fields`."""
    for recorded in log:
        event = recorded.event
        if type(event) is kind and all(getattr(event, k) == v for k, v in fields.items()):
            return recorded
    raise LookupError(f"no {kind.__name__} with {fields}")


def alter(log: Log, position: int, **fields: Any) -> Log:
    """`log` with the event at `position` given other field values."""
    return [
        msgspec.structs.replace(r, event=msgspec.structs.replace(r.event, **fields))
        if r.position == position
        else r
        for r in log
    ]


def upto(log: Log, position: int) -> Log:
    """`log` cut after `position`."""
    return [r for r in log if r.position <= position]


def forge(log: Log, *events: Event, stream: str | None = None) -> Log:
    """`log` with `events` appended (no delivery identity), each at the next position and
    the next version of its stream (the Work's, unless `stream` names another)."""
    out = list(log)
    for event in events:
        target = stream or f"work/{event.work_id}"  # type: ignore[attr-defined]
        version = max((r.version for r in out if r.stream == target), default=0) + 1
        last = out[-1]
        out.append(RecordedEvent(last.position + 1, target, version, None, last.recorded_at, event))
    return out


def reported(violations: list[Violation]) -> set[str]:
    """The names of the invariants `violations` break."""
    return {v.invariant for v in violations}
