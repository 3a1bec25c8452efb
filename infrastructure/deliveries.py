"""Delivery identities: which events of an append are already recorded (the stores' rule).

Every store applies the idempotency rule of the store contract (`rota.application.ports`)
through `match_deliveries`, so SQLite and PostgreSQL cannot drift apart on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from rota.application.errors import ConcurrencyConflict, DeliveryConflict
from rota.application.ports import NewEvent, RecordedEvent
from rota.domain.events.work import WorkSubmitted, same_delivery

T = TypeVar("T")


class Deliveries:
    """Which events of one append are already recorded, by their delivery identity.

    `originals[i]`: event i's identity is recorded (the recorded event); `aliases[i]`: it
    repeats the identity of an earlier event j of the same append (`aliases[i] == j`). Every
    other event is new. Built by `match_deliveries`; the stores' idempotency rule, once.
    """

    __slots__ = ("aliases", "count", "originals")

    def __init__(self, count: int) -> None:
        self.count = count
        self.originals: dict[int, RecordedEvent] = {}
        self.aliases: dict[int, int] = {}

    def all_new(self) -> bool:
        """Whether every event of the append is new (the common case)."""
        return not self.originals and not self.aliases

    def is_new(self, index: int) -> bool:
        return index not in self.originals and index not in self.aliases

    def all_recorded(self) -> list[RecordedEvent] | None:
        """The originals, one per event, when every event is a duplicate; else None."""
        if not self.count or len(self.originals) + len(self.aliases) != self.count:
            return None
        return [self.originals[self.aliases.get(i, i)] for i in range(self.count)]

    def merge(self, written: Iterable[T]) -> list[RecordedEvent | T]:
        """One entry per event: the original, or the next of `written` (the new ones, in order)."""
        fresh = iter(written)
        merged: list[RecordedEvent | T] = []
        for index in range(self.count):
            if index in self.aliases:
                merged.append(merged[self.aliases[index]])
            elif index in self.originals:
                merged.append(self.originals[index])
            else:
                merged.append(next(fresh))
        return merged


def match_deliveries(
    events: Sequence[NewEvent], recorded: Callable[[str], RecordedEvent | None]
) -> Deliveries:
    """Match an append's delivery identities against the log (`recorded` looks one up).

    Raises `DeliveryConflict` when an identity is recorded with another stream or event, or
    given twice in the append with different events. An input is the same event as the
    first input a `core.work.submitted` carries under its identity (`same_delivery`).
    """
    found = Deliveries(len(events))
    first_use: dict[str, int] = {}
    for index, new in enumerate(events):
        delivery_id = new.delivery_id
        if delivery_id is None:
            continue
        earlier = first_use.setdefault(delivery_id, index)
        if earlier != index:
            first = events[earlier]
            if first.stream != new.stream or not same_delivery(first.event, new.event):
                raise DeliveryConflict(delivery_id, None)
            found.aliases[index] = earlier
            continue
        original = recorded(delivery_id)
        if original is None:
            continue
        if original.stream != new.stream or not same_delivery(original.event, new.event):
            if original.stream == new.stream and isinstance(new.event, WorkSubmitted):
                # Another writer defined the Work first (with another definition or first
                # input): a new Work's definition expects its stream new, so the decision
                # is taken again on the Work now recorded, as without the identity.
                raise ConcurrencyConflict(new.stream, 0, original.version)
            raise DeliveryConflict(delivery_id, original.position)
        found.originals[index] = original
    return found
