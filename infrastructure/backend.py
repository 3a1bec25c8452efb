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

And it says what the offline tools need to know: `log_file` (the file the log is kept in,
for doctor's and recover-corrupt's file checks; None for a store that is not one file),
`processes_share` (a child process that opens `url` sees the same log, so replay may fold
in forked children) and `follow_env` (the eventsourcing environment that follows the log).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Protocol

from rota.application.ports import Clock, EventStore
from rota.infrastructure.stored_projections import StoredProjections


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

    def follow_env(self) -> dict[str, str]:
        """The environment that points eventsourcing's `RotaLog` at this store."""
        from rota.application.errors import PortCode, StoreError

        raise StoreError(
            f"{type(self).__module__}: this store cannot be followed by another "
            "eventsourcing application",
            code=PortCode.INVALID_STORE_URL,
        )


__all__ = ["Backend", "StoreLock"]
