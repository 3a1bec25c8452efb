"""What one store package offers the rest of rota: its `Backend`, chosen once by the URL.

`store_url.backend(url)` parses a store URL and hands back the backend object of the package
it names (`sqlite.backend`, `postgres.backend`, `memory.backend`); every caller that used to
ask "is it PostgreSQL?" now calls the object instead. As eventsourcing's persistence
`Factory` classes (`sqlite.py`, `postgres.py`, `popo.py`): one object per store kind that
constructs the recorders (here the log and the projection store) and knows where they live.

A backend opens:
- `open_log`: the event store (`EventStore`) the URL names;
- `open_projections`: the projection store the URL itself names (`--projections URL`);
- `projections_beside(log)`: the projection store a log keeps by default (the file
  `<log>.projections`, the PostgreSQL log's own schema, the in-memory log's own tables);
- `daemon_lock`: the lock `rota run` holds shared and `rota recover-corrupt` exclusively.

And it does the two store-level jobs of the offline tools (`rota doctor`, `rota
recover-corrupt`), which keep the orchestration (guards, locks, reports) and call these:
- `check_integrity`: the store's own integrity check of the log (SQLite: `PRAGMA
  integrity_check` of the file, read-only; PostgreSQL and memory: not applicable), an
  `Integrity` doctor's `log_integrity` check wraps;
- `isolate_projections`: an `Isolation` of the projections under a backup name, every
  refusal (`IsolationRefused`) made before it is returned, whose `run` moves them aside
  (SQLite: the file and its `-wal`/`-shm`/`-journal` into
  `diagnostics/scheduler-recovery/NAME` beside the log, `sqlite.isolation`; PostgreSQL: the
  rows into `rota_projection_recovery`, `postgres.projection_recovery`; memory: refused,
  its projections die with the process).

And it says what the offline tools need to know: `log_file` (the file the log is kept in,
for doctor's and recover-corrupt's file checks; None for a store that is not one file),
`processes_share` (a child process that opens `url` sees the same log, so replay may fold
in forked children) and `follow_env` (the eventsourcing environment that follows the log).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, EventStore
from rota.infrastructure.store_url import redact_url
from rota.infrastructure.stored_projections import StoredProjections

NOT_APPLICABLE = (
    "not applicable on PostgreSQL or in memory: no log file to check (the server "
    "checks its own pages; hash_chain reads every event)"
)


class Integrity(NamedTuple):
    """What `Backend.check_integrity` found: whether the log is sound, and one line saying
    what was checked and what it answered (`detail` of doctor's `log_integrity`)."""

    sound: bool
    detail: str


class IsolatedCopy(NamedTuple):
    """One thing an isolation moves (or moved): a file, or a table's rows (`rows`)."""

    name: str
    original: str
    size: int
    sha256: str
    rows: int | None = None


class IsolationRefused(ProjectionStoreError):
    """A backend will not isolate its projections (the code says why); nothing was changed."""

    code = PortCode.PROJECTION_STORE


class Isolation(abc.ABC):
    """The projections of one store, to be moved aside under a backup name; made by
    `Backend.isolate_projections` after every refusal, so nothing has changed yet.

    `backup` and `manifest` name where the copies and their manifest go (as a report
    shows them); `planned` reads what would move; `run` moves it."""

    backup: str
    manifest: str

    @abc.abstractmethod
    def planned(self) -> list[IsolatedCopy]:
        """What `run` would move, with sizes and SHA-256 read now (nothing is written)."""

    @abc.abstractmethod
    def run(self, manifest: dict[str, object]) -> list[IsolatedCopy]:
        """Move everything aside, with `manifest` (the caller's fields, then what moved)
        written beside the copies; what moved, measured on the copies. All or nothing
        where the store allows it (one PostgreSQL transaction); a copy that differs from
        its source keeps the source (`copy_failed`)."""


class StoreLock(Protocol):
    """A daemon lock: shared (`rota run`) or exclusive (`rota recover-corrupt`), never
    blocking, held until `release()` or the holder's death. `where` names it in messages."""

    where: str
    exclusive: bool

    def acquire(self) -> bool:
        """Take the lock; False (at once) when a holder of the other kind has it."""
        ...

    def release(self) -> None:
        """Give the lock up (a no-op when not held)."""
        ...

    def held_by_another(self) -> bool:
        """Whether someone else holds it (a probe: it takes nothing and creates nothing)."""
        ...


class Backend(abc.ABC):
    """One store package's way in; see the module docstring."""

    url: str
    # A child process that opens `url` sees the same log (and may fold it for replay).
    processes_share: bool = True
    # The configuration's `[store]` settings this backend's log takes (`open_log`): the
    # others are not passed to it (`reply_timeout` is PostgreSQL's alone).
    settings: frozenset[str] = frozenset({"synchronous"})

    @abc.abstractmethod
    def open_log(
        self, *, clock: Clock | None = None, create: bool = True, **settings: Any
    ) -> EventStore:
        """The event store the URL names; `create`: make it when missing (else
        `store_not_found`). `settings` are the store's own (SQLite's `synchronous`)."""

    @abc.abstractmethod
    def open_projections(
        self, *, must_exist: bool = False, read_only: bool = False, clock: Clock | None = None
    ) -> StoredProjections:
        """The projection store the URL itself names (`--projections URL`).

        `must_exist`: `no_projection_store` rather than an empty new one; `read_only`: a
        session that cannot write (doctor), where the backend has such sessions."""

    @abc.abstractmethod
    def projections_beside(
        self,
        log: EventStore,
        *,
        must_exist: bool = False,
        read_only: bool = False,
        clock: Clock | None = None,
    ) -> StoredProjections | None:
        """The projection store `log` (opened from this URL) keeps by default; None when
        it has no place for one."""

    @abc.abstractmethod
    def daemon_lock(self, *, exclusive: bool = False) -> StoreLock | None:
        """The daemon lock of the store; None for a store whose daemons need none (the
        PostgreSQL log is fenced by leases alone)."""

    @property
    def log_file(self) -> Path | None:
        """The one file the log is kept in (doctor's and recover-corrupt's file checks);
        None for a store that is not a file."""
        return None

    def enable_incremental_vacuum(self) -> bool:
        """Switch the log's file to giving freed pages back a few at a time (`rota
        retention vacuum --enable`, no other connection open); False: a store with no file
        to shrink (its server reuses freed space itself)."""
        return False

    def check_integrity(self, *, immutable: bool = False) -> Integrity:
        """The store's own integrity check of the log, read-only (nothing is created or
        written). `immutable`: the caller saw no connection open on the store (SQLite then
        reads the file without creating its companions). A store with no such check
        answers sound, "not applicable" (its server checks its own pages, and the hash
        chain, checked apart, reads every event)."""
        return Integrity(True, NOT_APPLICABLE)

    def isolate_projections(
        self, projections: Path | StoredProjections | None, name: str
    ) -> Isolation:
        """The isolation of `projections` (a projection file, or the store this backend's
        `projections_beside` opened) under the backup name `name` (already validated);
        raises `IsolationRefused` when the backup name is taken (`backup_exists`), a path
        is unsafe (`unsafe_path`), there is nothing to isolate (`no_projection_store`) or
        the store keeps no projections to isolate (`not_sqlite`). Nothing changes until
        its `run`; the caller holds the locks that keep writers out."""
        raise IsolationRefused(
            f"the projections of {redact_url(self.url)} are not kept in a file or a "
            "PostgreSQL schema: nothing to isolate ('rota replay rebuild' rebuilds them)",
            code=PortCode.NOT_SQLITE,
        )

    def follow_env(self) -> dict[str, str]:
        """The environment that points eventsourcing's `RotaLog` at this store."""
        from rota.application.errors import PortCode, StoreError

        raise StoreError(
            f"{type(self).__module__}: this store cannot be followed by another "
            "eventsourcing application",
            code=PortCode.INVALID_STORE_URL,
        )


__all__ = [
    "NOT_APPLICABLE",
    "Backend",
    "Integrity",
    "IsolatedCopy",
    "Isolation",
    "IsolationRefused",
    "StoreLock",
]
