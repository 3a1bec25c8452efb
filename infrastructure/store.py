"""The event store contract: what every rota store (SQLite, PostgreSQL) promises.

The log is an ordered sequence of recorded events. Each has a **position** (1, 2, 3 ...,
gapless and increasing in commit order: a reader that has seen position N has seen every
event at or below N), a **stream** and a **version** within it (1, 2, 3 ..., unique together),
a **type** and **type_version**, an optional **delivery identity** (unique in the whole log),
the payload, the **recording time** (the store's clock) and a **hash** chained to the
previous event (see `rota.infrastructure.chain`).

Atomicity: one `append` writes all its events or none. Expected versions are checked for
every stream named in `expected` (a stream need not receive an event to be fenced); a
stale one raises `ConcurrencyConflict` and writes nothing.

Idempotency: an event whose delivery identity is already recorded is not written again;
`append` returns the recorded event in its place. If every event of an append is such a
duplicate, the append is a no-op that returns the originals, and expected versions are not
checked (a caller retrying after a lost acknowledgement gets its original answer). The same
identity with a different stream, type or payload raises `DeliveryConflict`.

The events an append returns are decoded from what was stored, exactly as a later read or
replay will see them (an `int` given for a `float` field comes back a `float`).

Errors are the store error tree in `rota.infrastructure.errors`; driver exceptions never
escape. Stores are safe to share between threads; a store must not be used in a child
process after `fork()` (open it again there).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

import msgspec

from rota.domain.events import Event

from .clock import parse_timestamp
from .errors import DeliveryConflict

T = TypeVar("T")


class NewEvent(msgspec.Struct, frozen=True):
    """An event to append to `stream`, with its optional delivery identity."""

    stream: str
    event: Event
    delivery_id: str | None = None


class RecordedEvent(msgspec.Struct, frozen=True, gc=False):
    """An event as the log holds it, decoded to the current schema."""

    position: int
    stream: str
    version: int
    delivery_id: str | None
    recorded_at: str
    event: Event

    @property
    def type(self) -> str:
        return self.event.tag()

    @property
    def recorded_time(self) -> datetime:
        return parse_timestamp(self.recorded_at)


class RawRecord(msgspec.Struct, frozen=True):
    """A stored row exactly as written: what audit, export and import work on."""

    position: int
    stream: str
    version: int
    type: str
    type_version: int
    delivery_id: str | None
    data: str | bytes
    recorded_at: str
    hash: str


class LogHead(msgspec.Struct, frozen=True):
    """The last recorded position and its hash (position 0 and the genesis hash when empty)."""

    position: int
    hash: str


class AppendResult(msgspec.Struct, frozen=True):
    """What an append recorded: one entry per event given, in order; `written` new ones."""

    recorded: list[RecordedEvent]
    written: int

    @property
    def duplicate(self) -> bool:
        return self.written == 0 and bool(self.recorded)


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
    given twice in the append with different events.
    """
    found = Deliveries(len(events))
    first_use: dict[str, int] = {}
    for index, new in enumerate(events):
        delivery_id = new.delivery_id
        if delivery_id is None:
            continue
        earlier = first_use.setdefault(delivery_id, index)
        if earlier != index:
            if events[earlier] != new:
                raise DeliveryConflict(delivery_id, None)
            found.aliases[index] = earlier
            continue
        original = recorded(delivery_id)
        if original is None:
            continue
        if original.stream != new.stream or original.event != new.event:
            raise DeliveryConflict(delivery_id, original.position)
        found.originals[index] = original
    return found


class EventStore(abc.ABC):
    """An append-only, hash-chained event log. See the module docstring for the contract."""

    url: str

    @abc.abstractmethod
    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        """Append atomically; `expected[stream]` is the version the stream must be at (0: new)."""

    @abc.abstractmethod
    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events with position > after, in position order, at most `limit`."""

    @abc.abstractmethod
    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        """A stream's events with version > after, in version order."""

    @abc.abstractmethod
    def stream_version(self, stream: str) -> int:
        """The stream's last version, 0 if it has no events."""

    @abc.abstractmethod
    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        """Stored rows with position > after, undecoded, in position order."""

    @abc.abstractmethod
    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        """The event recorded under a delivery identity, if any."""

    @abc.abstractmethod
    def head(self) -> LogHead:
        """The last position and hash."""

    @property
    @abc.abstractmethod
    def store_id(self) -> str:
        """The random identity the store got when it was created (checkpoints name it)."""

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        """Import rows exactly as they were recorded elsewhere (same positions, times, hashes).

        The first record's position must be head + 1 and its hash must link to the current
        head hash; positions must then run on without a gap, and every record's hash is
        recomputed from its content and the previous hash and must equal the one given.
        Anything else raises `StoreError` with code `import_mismatch`. All or nothing: one
        transaction. This is how `rota import` moves a log between stores; never use it to
        record new decisions (use `append`).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot import raw rows yet")

    @abc.abstractmethod
    def wait_for_commit(self, after: int, timeout: float) -> bool:
        """Block until the log holds a position > after (from any process) or timeout."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The store's clock: the time recorded events get and leases are judged by."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; idempotent."""

    def subscribe(
        self, after: int = 0, page: int = 1000, poll: float = 1.0
    ) -> Iterator[RecordedEvent]:
        """Yield every event after `after`, then wait for and yield new commits, forever.

        Stop by closing the generator (or breaking out of the loop).
        """
        position = after
        while True:
            batch = self.read(position, page)
            if batch:
                yield from batch
                position = batch[-1].position
                continue
            self.wait_for_commit(position, poll)

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
