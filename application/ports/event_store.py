"""The event store: what every rota store (SQLite, PostgreSQL, memory) promises.

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

The events an append returns are exactly as a later read or replay will see them: the
events given, where each is already what decoding its stored payload gives back
(`Codec.canonical`), the others decoded from what was stored (an `int` given for a `float`
field comes back a `float`, a payload dict the caller holds comes back rota's own copy).

Merkle tree: every store keeps the RFC 9162 tree whose leaves are the events' chain
hashes (position P is leaf P - 1), updated in the transaction of each append and import,
so a tree head or proof at any size up to the head is exact as soon as the events are
visible (`rota.infrastructure.merkle` has the byte format and what is stored). A size
beyond the head, or a position outside 1..size, is `StoreError` with code `tree_size`; a
stored node that is missing (a damaged store) is `tree_node_missing`.

Writability: a store whose server can fail over (PostgreSQL) says whether it takes writes
(`state`, `probe`: `StoreState`) and refuses every write once its log no longer holds what
this process saw or a checkpoint recorded (`known_head`: `LogRegressed`, `log_regressed`),
rather than write at positions an acknowledged event held. The others are always writable.

Errors are the store error tree in `rota.application.errors`; driver exceptions never
escape. Stores are safe to share between threads; a store must not be used in a child
process after `fork()` (open it again there).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from rota.application.ports.clock import Clock
from rota.application.ports.records import (
    WRITABLE,
    AppendResult,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
    StoreSpace,
    StoreState,
    TreeHead,
)


class EventStore(abc.ABC):
    """An append-only, hash-chained event log. See the module docstring for the contract.

    `url` names the store (another handle opens it from the URL: `store_url.backend`);
    `path` is the one file the log is kept in (None for a store that is not a file);
    `clock` is the clock the store was opened with (None: the system's, or for PostgreSQL
    the database's), whose monotonic reading the host measures elapsed time with.
    """

    url: str
    path: Path | None = None
    clock: Clock | None = None

    def reopened(self) -> EventStore | None:
        """Another handle on this very log, opened as this one was (a read-only log opens
        read-only again, an in-memory one shares its log), for a child of this process to
        use; None: open `url` again."""
        return None

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

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several streams' events, each in version order, keyed by stream; a stream with
        no event is not a key. This default reads them one by one; a store may answer in
        one query (the submit of many new Works asks about each of them)."""
        found: dict[str, list[RecordedEvent]] = {}
        for stream in streams:
            events = self.read_stream(stream)
            if events:
                found[stream] = events
        return found

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        """Events of every stream whose name starts with `prefix` (non-empty), position >
        after (and <= upto), in position order, at most `limit`. This default filters
        `read`; the stores answer it from their (stream, version) index."""
        found: list[RecordedEvent] = []
        while len(found) < limit:
            batch = self.read(after, 5000)
            if not batch:
                break
            for r in batch:
                if upto is not None and r.position > upto:
                    return found
                if r.stream.startswith(prefix):
                    found.append(r)
                    if len(found) >= limit:
                        break
            after = batch[-1].position
        return found

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

    def rewrite_payloads(self, rows: Sequence[tuple[int, bytes]]) -> int:
        """Replace the stored payload of each `(position, payload)`, keeping every other
        column (the hash included), in one transaction; returns the rows changed.

        The only in-place change rota ever makes to its log: a retention prune, after its
        `core.retention.pruned` event is recorded, puts each event's summary in place of
        its payload (`rota.replay.retention`). Never use it for anything else: `rota audit
        verify` accepts a rewritten row only inside a recorded prune's range."""
        raise NotImplementedError(f"{type(self).__name__} cannot prune payloads")

    def storage(self, reclaim: int = 0) -> StoreSpace | None:
        """The log file's pages; with `reclaim` > 0, first give back at most that many free
        pages to the file system, in one short write (SQLite's incremental vacuum). None: a
        store with no file to shrink (memory; PostgreSQL reuses space itself)."""
        return None

    def tree_head(self, size: int | None = None) -> TreeHead:
        """The Merkle tree's root over the first `size` events (None: the head)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no Merkle tree")

    def inclusion_path(self, position: int, size: int) -> list[bytes]:
        """RFC 9162 PATH of the event at `position` in the tree of `size` events (leaf
        first, 32 raw bytes each)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no Merkle tree")

    def consistency_path(self, old_size: int, new_size: int) -> list[bytes]:
        """RFC 9162 PROOF that the tree of `old_size` events is a prefix of the tree of
        `new_size` (0 < old_size <= new_size <= head; empty when they are equal)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no Merkle tree")

    def tree_nodes(self, level: int, after: int = -1, limit: int = 1000) -> list[tuple[int, bytes]]:
        """The stored tree nodes of `level` (>= 8) with index > after, by index, at most
        `limit`, as (index, hash): what `rota audit verify` compares with the rows.
        `NotImplementedError` when the store keeps no tree (one written before the tree
        existed that no writer has opened since, read-only)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no Merkle tree")

    def unfinished_import(self) -> str | None:
        """What an import into this store that has not finished was loading (the marker
        `mark_import` left: the export's head position and hash), or None. A store with
        one holds only part of a log: `bootstrap.open_log` refuses it (`import_incomplete`)
        to every command but the import that finishes it."""
        return None

    def mark_import(self, marker: str | None) -> None:
        """Record, in its own transaction, that an import into this store has begun and
        not finished (`marker`), or with None that it finished."""
        raise NotImplementedError(f"{type(self).__name__} cannot import raw rows yet")

    @abc.abstractmethod
    def wait_for_commit(self, after: int, timeout: float) -> bool:
        """Block until the log holds a position > after (from any process) or timeout."""

    def wake_waiters(self) -> None:
        """Make every `wait_for_commit` in progress in this process return (False) now.

        How a loop that sleeps on the log is told to stop; waits begun later are unaffected.
        A store that cannot (none of rota's) leaves such waits to their timeout.
        """
        return None

    def deferring(self, *, ahead: bool = False) -> contextlib.AbstractContextManager[None]:
        """Appends of this thread inside return once committed, maybe not yet durable (a
        store whose durability wait can leave its write lock: SQLite on synchronous FULL);
        the caller must call `sync()` after the block before telling anyone they happened.

        `ahead`: the block goes on with work of its own after its appends (a cadence pass
        preparing its launches), so the store may begin making each commit durable at once,
        in the background, while that work runs. Without it the durability work waits for
        `sync()`: a block that only applies its own few events would pay more for handing
        the wait to another thread and back than the overlap saves. Either way nothing is
        durable, or may be told, before `sync()` returns. Nests (an `ahead` block makes the
        blocks inside it `ahead` too); the default store's commits are durable at once, and
        this does nothing."""
        return contextlib.nullcontext()

    def sync(self) -> None:
        """Make this thread's committed appends durable, unless an outer `deferring()`
        block of this thread is still open (it syncs); no-op when nothing is pending."""
        return None

    def nothing_after(self, position: int) -> bool:
        """True only when the store knows, without reading the log, that its head is
        `position` (this process wrote it and nobody has committed since); False when
        it does not know. Lets a writer skip the read that would find nothing new."""
        return False

    def state(self) -> StoreState:
        """Whether the store takes writes, as it last found, without asking the server:
        what a daemon reads after each pass (`StoreState`). A store that cannot lose its
        server or its log's tail (SQLite, memory) is always writable."""
        return WRITABLE

    def probe(self) -> StoreState:
        """Ask now: reach the server, check that it takes writes and that its log still
        holds what this process knows (`known_head`); the state found. A daemon whose
        store is not writable probes, with backoff, instead of running passes."""
        return self.state()

    def known_head(self, position: int, hash_hex: str) -> StoreState:
        """The log held `hash_hex` at `position`, as recorded outside the store (a
        checkpoint): from now on a log that is behind it, or holds another hash there, is
        `log_regressed` and refuses writes. Returns the state found. A store that keeps
        no such guard ignores it (the checkpoint checks of doctor and audit still apply)."""
        return self.state()

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
