"""Audit across a prune: tell a pruned row from a tampered one.

A pruned row's payload is its summary (`rota.infrastructure.retention_summary`), so its
stored hash can no longer be recomputed from its content. It is accepted when, and only
when:
- a recorded `core.retention.pruned` event's ranges cover its position (a summary found
  anywhere else is tampering, reported at that position); and
- the Merkle root of the rows' stored hashes at that prune's tree size equals the root the
  prune recorded (the same root the checkpoint written just before the prune carries,
  signed when a key is configured). A changed hash of a pruned row changes that root (and
  breaks the next row's link), so it is reported too.
Every row that is not pruned is verified by the chain as before: the row after a pruned one
links to the pruned row's stored hash, which the root vouches for.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import msgspec

from rota.application.ports import EventStore, RawRecord
from rota.domain.events import RetentionPruned
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.merkle import Builder

STREAM = "retention"


class Prune(msgspec.Struct, frozen=True):
    """One recorded prune: where its event is, and what it recorded."""

    position: int
    event: RetentionPruned


def prunes_of(store: EventStore) -> list[Prune]:
    """The prunes recorded in a store's log, in log order."""
    return [
        Prune(r.position, r.event)
        for r in store.read_stream(STREAM)
        if isinstance(r.event, RetentionPruned)
    ]


def prunes_in(records: Iterable[RawRecord]) -> list[Prune]:
    """The prunes recorded among rows (an export read once beforehand)."""
    found = []
    for r in records:
        if r.stream == STREAM and r.type == RetentionPruned.tag():
            event = DEFAULT_CODEC.decode(r.type, r.type_version, r.data, r.position)
            assert isinstance(event, RetentionPruned)
            found.append(Prune(r.position, event))
    return found


class PruneCheck:
    """Fed every row in position order (`row`), says what is wrong with the pruned ones."""

    def __init__(self, prunes: list[Prune], *, roots: bool = True) -> None:
        """`roots` False: a part of a log (an export `--from N`), whose rows cannot give a
        root; its pruned rows are judged by the recorded ranges only."""
        self.prunes = prunes
        spans = sorted((first, last, p) for p in prunes for first, last in p.event.ranges)
        self._firsts = [s[0] for s in spans]
        self._spans = spans
        self._roots = {p.event.tree_size: p for p in prunes}
        self._builder = Builder() if prunes and roots else None
        self.pruned = 0

    def covering(self, position: int) -> Prune | None:
        """The prune whose ranges hold `position`, if any."""
        i = bisect.bisect_right(self._firsts, position) - 1
        if i >= 0 and self._spans[i][0] <= position <= self._spans[i][1]:
            return self._spans[i][2]
        return None

    def pruned_row(self, position: int) -> str | None:
        """Why the pruned row at `position` is not acceptable, or None (it is counted)."""
        if self.covering(position) is None:
            return (
                "the row's payload is a retention summary but no recorded prune covers "
                "its position (it was rewritten outside a prune: tampering)"
            )
        self.pruned += 1
        return None

    def add(self, position: int, chain_hash: str) -> str | None:
        """Feed one row's stored hash; at a prune's tree size, compare the root."""
        if self._builder is None:
            return None
        self._builder.add_hex(chain_hash)
        prune = self._roots.get(position)
        if prune is not None and self._builder.root().hex() != prune.event.root:
            return (
                f"the rows' hashes up to position {position} no longer give the Merkle root "
                f"the prune at position {prune.position} recorded: a pruned row's hash was "
                "changed (tampering)"
            )
        return None

    def summary(self) -> str | None:
        """`N events pruned by M prunes (policy ...)`, or None when nothing was pruned."""
        if not self.prunes:
            return None
        policies = ", ".join(sorted({p.event.policy for p in self.prunes}))
        return f"{self.pruned} events pruned by {len(self.prunes)} prune(s) (policy {policies})"


class PruneNote(msgspec.Struct, frozen=True):
    """What a reader says where a prune took detail away (`explain`, time travel)."""

    position: int
    policy: str
    archive: str
    first: int
    last: int
    text: str


def notes(
    store: EventStore, work_id: str | None = None, upto: int | None = None
) -> list[PruneNote]:
    """The prunes that rewrote rows a reader shows: those naming `work_id` (None: any), with
    pruned rows at or before `upto` (None: anywhere)."""
    found = []
    for prune in prunes_of(store):
        event = prune.event
        named = work_id in event.work_ids or any(p.work_id == work_id for p in event.partial)
        if work_id is not None and not named:
            continue
        first = min(a for a, _ in event.ranges)
        last = max(b for _, b in event.ranges)
        if upto is not None and first > upto:
            continue
        text = (
            f"payloads pruned by policy {event.policy} at position {prune.position} "
            f"(archive {event.archive}): inputs and results read as null; "
            f"'rota export --archive DIR' restores them"
        )
        found.append(PruneNote(prune.position, event.policy, event.archive, first, last, text))
    return found
