"""The projection store.

Projections (the scheduler's and the auditor's history) are folds of the log stored with
the position and log hash they applied, written in one transaction with their rows, so a
stored projection is exactly-once and restartable. A projection store never decides
anything: the log is the authority, and a stored projection that does not extend the log
(another log, a rewritten one, an older fold version) is refused on load
(`last_refusal` says why) and the caller folds from position 0. One process at a time
keeps a store (`writer_lock`); others read it.

The port names no projection class: a projection is typed by what the store needs of it
(`Persisted`). What `load_scheduler` and `load_history` hand back is the scheduler's and
the history's projection (`rota.projections`), and `keep_on_disk` is given the scheduler's;
the application narrows them to those classes (`rota.application.live_projections`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import msgspec

from rota.application.ports.event_store import EventStore
from rota.application.ports.records import LogHead


class ProjectionMeta(msgspec.Struct, frozen=True):
    """One stored projection's tracking row: fold version, position and log hash applied."""

    name: str
    version: int
    position: int
    log_hash: str
    digest: str | None
    rebuilt_at: str | None
    saved_at: str
    generation: int


class Persisted(Protocol):
    """What a projection store needs of a projection: identity, position, rows, dirty keys."""

    name: str
    version: int
    position: int
    dirty: set[str]

    def row(self, key: str) -> bytes | None: ...

    def row_keys(self) -> Iterator[str]: ...


class WriterLock(Protocol):
    """Exclusive, non-blocking, held until `release()` (or the holder's death)."""

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; False (at once) when another holder has it."""
        ...

    def release(self) -> None:
        """Give the lock up (a no-op when not held)."""
        ...


class ProjectionStore(abc.ABC):
    """Projections stored beside the log. See the module docstring.

    Every write is one transaction (rows, position, log hash); reads see one snapshot.
    Errors are `ProjectionStoreError` (`rota.application.errors`).
    """

    last_refusal: str | None
    # Whether `load_scheduler(lazy=True)` leaves quiet Works in the store, found on demand.
    lazy_works: bool = False

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """Where the projections are kept, for messages (a path, or a PostgreSQL schema)."""

    @abc.abstractmethod
    def meta(self, name: str) -> ProjectionMeta | None:
        """The tracking row of one projection, None when nothing is stored."""

    @abc.abstractmethod
    def metas(self) -> dict[str, ProjectionMeta]:
        """Every projection's tracking row, by name."""

    @abc.abstractmethod
    def row(self, name: str, key: str) -> bytes | None:
        """One stored row's value."""

    @abc.abstractmethod
    def rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        """A projection's meta and every row, read in one snapshot (in no set order)."""

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside the block (`meta`, `sorted_rows`, ...) sees one snapshot: a read
        transaction held until the block ends. The default: each read sees its own."""
        yield

    def sorted_rows(self, name: str) -> Iterator[tuple[str, bytes]]:
        """A projection's rows in key order (the keys' byte order), read as they are iterated,
        in the snapshot of an enclosing `snapshot()`: what `rota replay verify` and `rota
        doctor` stream through without holding every row. The default sorts `rows()`."""
        yield from sorted(self.rows(name)[1])

    @abc.abstractmethod
    def refusal(self, meta: ProjectionMeta | None, version: int, log: EventStore) -> str | None:
        """Why a stored projection cannot be used with this log and fold version, or None."""

    @abc.abstractmethod
    def load_scheduler(self, log: EventStore, *, lazy: bool = False) -> Persisted | None:
        """The stored scheduler projection, or None (see `last_refusal`) to fold from 0.

        `lazy`: hold only the Works some index names and find the quiet ones on demand
        (where `lazy_works`)."""

    @abc.abstractmethod
    def keep_on_disk(self, scheduler: Persisted, log: EventStore) -> None:
        """After its keeper saved `scheduler` here: find its Works not in memory on demand."""

    @abc.abstractmethod
    def work_rows(self, after: str, limit: int) -> tuple[int | None, list[tuple[str, bytes]]]:
        """The stored scheduler projection's position (None: nothing stored) and its first
        `limit` Work rows (`work/<id>`, the encoded Work) whose id sorts after `after`, in
        key order, read in one snapshot: what a listing pages through."""

    @abc.abstractmethod
    def load_history(self, log: EventStore) -> Persisted | None:
        """The stored history projection, or None (see `last_refusal`)."""

    @abc.abstractmethod
    def save(
        self,
        projections: Persisted | Sequence[Persisted],
        log: EventStore | LogHead,
        *,
        digest: bool = False,
    ) -> int:
        """Write what each projection changed since its last save, its position and the log
        hash there, in one transaction; how many rows were written."""

    @abc.abstractmethod
    def replace(self, projections: Sequence[Persisted], log: EventStore | LogHead) -> None:
        """Swap in projections built afresh (a rebuild), all rows and metas in ONE
        transaction; a failure leaves the old projections intact."""

    @abc.abstractmethod
    def drop(self, name: str) -> None:
        """Forget a projection (rows and meta) in one transaction."""

    @abc.abstractmethod
    def attach(self, meta: ProjectionMeta) -> None:
        """Continue the stored projection `meta` describes as this writer's own."""

    @abc.abstractmethod
    def history_loader(self) -> Callable[[str], bytes | None]:
        """A loader reading history rows on demand (a store-backed `HistoryProjection`)."""

    @abc.abstractmethod
    def writer_lock(self) -> WriterLock:
        """The lock the one process keeping this store current holds."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; idempotent."""

    def __enter__(self) -> ProjectionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
