"""The log's records: an event to append (`NewEvent`), an event as the log holds it
(`RecordedEvent`), a stored row as written (`RawRecord`), the log's head (`LogHead`) and what
an append recorded (`AppendResult`), and the
Merkle tree's head at a size (`TreeHead`).

What each field means, and what an append promises about them, is the event store's
contract (`rota.application.ports.event_store`). Recording times are the log's timestamp
form (`rota.application.ports.timestamps`).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from rota.application.ports.timestamps import parse_timestamp
from rota.domain.events import Event


class NewEvent(msgspec.Struct, frozen=True, gc=False):
    """An event to append to `stream`, with its optional delivery identity (`gc=False`, as
    `RecordedEvent`: it holds strings and an event, so it cannot form a cycle)."""

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


class StoreState(msgspec.Struct, frozen=True):
    """Whether the store takes writes, as it last found (`EventStore.state`, `probe`).

    `code` is empty while it does; else `store_unavailable` (the server cannot be
    reached), `store_read_only` (it answers but is read-only or recovering: a demoted
    primary, a replica) or `log_regressed` (its log no longer holds what this process saw
    or a checkpoint recorded: a failover lost acknowledged events), and `reason` says
    what was found, in words (never a credential)."""

    code: str = msgspec.field(default="")  # (an empty code: no error, writable)
    reason: str = ""

    @property
    def writable(self) -> bool:
        return not self.code


WRITABLE = StoreState()


class TreeHead(msgspec.Struct, frozen=True):
    """The Merkle tree over the first `size` events: its RFC 9162 root (32 raw bytes)."""

    size: int
    root: bytes


class StoreSpace(msgspec.Struct, frozen=True):
    """A store file's pages: `page_size` bytes each, `pages` in all, `free` of them on the
    freelist (space a prune freed, not yet given back), and its `vacuum` mode."""

    page_size: int
    pages: int
    free: int
    vacuum: str


class AppendResult(msgspec.Struct, frozen=True):
    """What an append recorded: one entry per event given, in order; `written` new ones."""

    recorded: list[RecordedEvent]
    written: int

    @property
    def duplicate(self) -> bool:
        return self.written == 0 and bool(self.recorded)
