"""The rules every projection store keeps, whatever its backend: what may load, how saves go.

Loading: a load refuses (returns None and says why in `last_refusal`, so the caller folds
from position 0) a projection of another fold version (bumping `version` rebuilds on open),
one whose position is beyond the log head, or one whose log hash differs from the log's at
that position (another log, or a rewritten one). The meta is checked before any row is
read, and again with the rows (a save may come between).

Exactly once: a save writes the changed rows, the position and the log hash in ONE
transaction, so the store always holds some consistent prefix of the log. One writer at a
time is assumed per store (the scheduler that keeps it). Another process that wrote
meanwhile (a `rota replay rebuild`) is detected by the generation counter every write
bumps: the next save then writes the whole projection instead of its changed rows.

`StoredProjections` implements the port's loading and saving once; a backend
(`SQLiteProjectionStore`, `PostgresProjectionStore`) supplies the connection (`_read`,
`_write`, `row`, `rows`, `metas`), the SQL hooks (`_read_meta`, `_clear`, `_write_rows`,
`_put_meta`, `_delete_meta`, and the key-range reads of the lazy open), `where`,
`writer_lock` and `close`, so the code here reaches the database only through those.
"""

from __future__ import annotations

import abc
import gc
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

import msgspec

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import (
    Clock,
    EventStore,
    LogHead,
    Persisted,
    ProjectionMeta,
    ProjectionStore,
)
from rota.application.timestamps import format_timestamp
from rota.infrastructure.projection_tables import hash_for, log_hash_at, next_meta
from rota.infrastructure.stored_works import keep_quiet_works_on_disk, open_with_quiet_works
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import ACTIVE_ROW, WORK_ROW, SchedulerProjection

T = TypeVar("T")
PAUSE_GC_ROWS = 40_000
# The keys of Work rows, `work/...`: from "work/" up to (not including) "work0" ('0' follows '/').
WORK_RANGE = (WORK_ROW, WORK_ROW[:-1] + chr(ord("/") + 1))
_ids = msgspec.json.Decoder(list[str])


class StoredProjections(ProjectionStore):
    """Loading with its refusals, and exactly-once saves; see the module docstring."""

    clock: Clock
    last_refusal: str | None
    _generations: dict[str, int]  # per projection, the generation this process last saw

    # -- loading ----------------------------------------------------------------------------

    def meta(self, name: str) -> ProjectionMeta | None:
        return self._read(lambda conn: self._read_meta(conn, name))

    def refusal(self, meta: ProjectionMeta | None, version: int, log: EventStore) -> str | None:
        """Why a stored projection cannot be used with this log and fold version, or None."""
        if meta is None:
            return "nothing stored yet"
        if meta.version != version:
            return f"stored by fold version {meta.version}, this rota's is {version}"
        head = log.head().position
        if meta.position > head:
            return (
                f"it is at position {meta.position} but the log ends at {head} "
                "(another log, or the log lost its tail)"
            )
        if log_hash_at(log, meta.position) != meta.log_hash:
            return (
                f"the log's hash at position {meta.position} is not the one it was built on "
                "(another log, or the log was rewritten)"
            )
        return None

    def load_scheduler(self, log: EventStore, *, lazy: bool = False) -> SchedulerProjection | None:
        """The stored scheduler projection, or None (see `last_refusal`) to fold from 0.

        `lazy` (for the one process that keeps this store, where `lazy_works`): load only
        the Works some index names and find the quiet ones on demand (`StoredWorks`), so
        opening costs the active Works, not every Work ever submitted.
        """
        if not (lazy and self.lazy_works):
            return self._load(SchedulerProjection, log, SchedulerProjection.from_rows)

        def build(position: int, rows: list[tuple[str, bytes]]) -> SchedulerProjection:
            return open_with_quiet_works(
                position, rows, log, self._stored_work_rows, self.work_rows
            )

        return self._load(SchedulerProjection, log, build, read=self._active_rows)

    def keep_on_disk(self, scheduler: Persisted, log: EventStore) -> None:
        """After a save of `scheduler` to this store by its keeper: let it find its Works
        not in memory on demand, as a lazy open does (`keep_quiet_works_on_disk`)."""
        if not isinstance(scheduler, SchedulerProjection):
            raise TypeError(f"keep_on_disk is given a {type(scheduler).__name__}")
        if self.lazy_works:
            keep_quiet_works_on_disk(scheduler, log, self._stored_work_rows, self.work_rows)

    def work_rows(self, after: str, limit: int) -> tuple[int | None, list[tuple[str, bytes]]]:
        """The stored scheduler projection's position (None: none stored) and its first
        `limit` Work rows whose Work id sorts after `after`, in key order (one snapshot)."""
        name = SchedulerProjection.name

        def body(conn: Any) -> tuple[int | None, list[tuple[str, bytes]]]:
            meta = self._read_meta(conn, name)
            if meta is None:
                return None, []
            return meta.position, self._rows_after(
                conn, name, WORK_ROW + after, WORK_RANGE[1], limit
            )

        return self._read(body)

    # Whether `load_scheduler(lazy=True)` leaves quiet Works on disk (a store whose rows can
    # be read by key range cheaply); a store without it loads every Work.
    lazy_works = True

    def _active_rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        """The meta and every row but the quiet Works' (one snapshot); every row if the
        projection names no active Works (an older layout)."""

        def body(conn: Any) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
            rows = self._rows_outside(conn, name, *WORK_RANGE)
            active = next((value for key, value in rows if key == ACTIVE_ROW), None)
            if active is None:
                rows = self._rows_between(conn, name, "", None)
            else:
                keys = [WORK_ROW + work_id for work_id in _ids.decode(active)]
                rows += self._rows_in(conn, name, keys)
            return self._read_meta(conn, name), rows

        return self._read(body)

    def _stored_work_rows(self) -> tuple[list[tuple[str, bytes]], bool]:
        """Every stored Work row of the scheduler projection, and whether the store still
        holds what this process saved or loaded last (else another writer rewrote it)."""
        name = SchedulerProjection.name

        def body(conn: Any) -> tuple[list[tuple[str, bytes]], bool]:
            meta = self._read_meta(conn, name)
            ours = meta is not None and meta.generation == self._generations.get(name)
            return self._rows_between(conn, name, *WORK_RANGE), ours

        return self._read(body)

    def load_history(self, log: EventStore) -> HistoryProjection | None:
        """The whole stored history projection in memory, or None (see `last_refusal`)."""
        return self._load(HistoryProjection, log, HistoryProjection.from_rows)

    def _load(
        self,
        kind: Any,
        log: EventStore,
        build: Callable[[int, list[Any]], T],
        read: Callable[[str], tuple[ProjectionMeta | None, list[tuple[str, bytes]]]] | None = None,
    ) -> T | None:
        # Check the meta first, so a refused projection costs no row reads.
        meta: ProjectionMeta | None = self.meta(kind.name)
        rows: list[tuple[str, bytes]] = []
        reason = self.refusal(meta, kind.version, log)
        if reason is None:
            meta, rows = (read or self.rows)(kind.name)
            reason = self.refusal(meta, kind.version, log)  # a save may have come between
        if reason is None and meta is not None:
            # Decoding makes many tracked containers (tuples) and no cycle. For a large
            # projection the cyclic collector's full passes over the growing heap cost more
            # than one pass afterwards (measured: 100k Works 1.0 s paused, 1.2-1.7 s not);
            # for a small one pausing costs more (10k Works: 95 ms against 75 ms).
            collecting = gc.isenabled() and len(rows) > PAUSE_GC_ROWS
            if collecting:
                gc.disable()
            try:
                loaded = build(meta.position, rows)
            except (msgspec.DecodeError, msgspec.ValidationError, KeyError, ValueError) as exc:
                reason = f"a stored row cannot be decoded: {exc}"
            else:
                self._generations[kind.name] = meta.generation
                self.last_refusal = None
                return loaded
            finally:
                if collecting:
                    gc.enable()
        self.last_refusal = f"{kind.name} projection not loaded: {reason}"
        return None

    # -- saving -----------------------------------------------------------------------------

    def save(
        self,
        projections: Persisted | Sequence[Persisted],
        log: EventStore | LogHead,
        *,
        digest: bool = False,
    ) -> int:
        """Write the rows each projection changed since its last save, its position and the
        log hash there, all in one transaction; returns how many rows were written.

        A projection this store did not load or save last (another writer came between, or
        none was stored) is written whole. `digest=True` also records its digest.
        """
        todo = [projections] if not isinstance(projections, Sequence) else list(projections)
        hashes = {p.name: hash_for(log, p.position) for p in todo}
        digests = {p.name: p.digest() for p in todo} if digest else {}  # type: ignore[attr-defined]
        now = format_timestamp(self.clock.now())

        def body(conn: Any) -> tuple[int, dict[str, int]]:
            written, generations = 0, {}
            for projection in todo:
                meta = self._read_meta(conn, projection.name)
                whole = (
                    meta is None
                    or meta.generation != self._generations.get(projection.name)
                    or meta.version != projection.version
                )
                if whole and meta is not None and getattr(projection, "loader", None):
                    raise ProjectionStoreError(
                        f"the {projection.name} projection in {self.where} was rewritten by "
                        "another writer; reopen it",
                        code=PortCode.PROJECTION_MOVED,
                    )
                # The keys first: listing every Work may read the stored rows (`StoredWorks`),
                # which must happen before they are cleared and not while they are written.
                keys = list(projection.row_keys()) if whole else sorted(projection.dirty)
                if whole:
                    self._clear(conn, projection.name)
                written += self._write_rows(conn, projection, keys, cleared=whole)
                # The bindings first met while encoding those rows (`WorkCodec.unsaved`).
                codec = getattr(projection, "codec", None)
                if codec is not None and codec.unsaved:
                    extra = sorted(codec.unsaved.difference(keys))
                    written += self._write_rows(conn, projection, extra, cleared=whole)
                generations[projection.name] = self._put_meta(
                    conn,
                    next_meta(
                        projection,
                        hashes[projection.name],
                        digests.get(projection.name),
                        now,
                        meta,
                        rebuilt=False,
                    ),
                )
            return written, generations

        written, generations = self._write(body)
        self._saved(todo, generations)
        return written

    def replace(self, projections: Sequence[Persisted], log: EventStore | LogHead) -> None:
        """Swap in projections built afresh (a rebuild): every old row out, every new row in,
        the meta updated, in ONE transaction; a failure leaves the old projection intact."""
        hashes = {p.name: hash_for(log, p.position) for p in projections}
        digests = {p.name: p.digest() for p in projections}  # type: ignore[attr-defined]
        now = format_timestamp(self.clock.now())

        def body(conn: Any) -> dict[str, int]:
            generations = {}
            for projection in projections:
                meta = self._read_meta(conn, projection.name)
                self._clear(conn, projection.name)
                self._write_rows(conn, projection, projection.row_keys(), cleared=True)
                generations[projection.name] = self._put_meta(
                    conn,
                    next_meta(
                        projection,
                        hashes[projection.name],
                        digests[projection.name],
                        now,
                        meta,
                        rebuilt=True,
                    ),
                )
            return generations

        self._saved(projections, self._write(body))

    def drop(self, name: str) -> None:
        """Forget a projection (rows and meta) in one transaction."""

        def body(conn: Any) -> None:
            self._clear(conn, name)
            self._delete_meta(conn, name)

        self._write(body)
        self._generations.pop(name, None)

    def _saved(self, projections: Iterable[Persisted], generations: dict[str, int]) -> None:
        for projection in projections:
            projection.dirty.clear()
            codec = getattr(projection, "codec", None)
            if codec is not None:
                codec.unsaved.clear()
            self._generations[projection.name] = generations[projection.name]

    def attach(self, meta: ProjectionMeta) -> None:
        """Continue the stored projection `meta` describes as this writer's own: the next
        save writes only changed rows (a store-backed projection opened from its meta)."""
        self._generations[meta.name] = meta.generation

    def history_loader(self) -> Callable[[str], bytes | None]:
        """A loader reading history rows on demand (for a store-backed `HistoryProjection`)."""
        return partial(self.row, HistoryProjection.name)

    # -- what a backend supplies -------------------------------------------------------------

    @abc.abstractmethod
    def _read(self, body: Callable[[Any], T]) -> T:
        """Run `body` on a connection in one read snapshot (in the store's own write, in it)."""

    @abc.abstractmethod
    def _write(self, body: Callable[[Any], T]) -> T:
        """Run `body` on a connection in one write transaction, writers serialized."""

    @abc.abstractmethod
    def _read_meta(self, conn: Any, name: str) -> ProjectionMeta | None:
        """A projection's meta row, read on `conn`."""

    @abc.abstractmethod
    def _clear(self, conn: Any, name: str) -> None:
        """Delete every row of a projection."""

    @abc.abstractmethod
    def _write_rows(
        self, conn: Any, projection: Persisted, keys: Iterable[str], *, cleared: bool
    ) -> int:
        """Write `keys`' rows; `cleared`: the table was emptied in this transaction."""

    @abc.abstractmethod
    def _put_meta(self, conn: Any, meta: ProjectionMeta) -> int:
        """Store a projection's meta row (`next_meta` made it); its generation."""

    @abc.abstractmethod
    def _delete_meta(self, conn: Any, name: str) -> None:
        """Delete a projection's meta row."""

    # Row reads by key, in byte order: the SQL hooks of the lazy open.

    @abc.abstractmethod
    def _rows_outside(self, conn: Any, name: str, low: str, high: str) -> list[tuple[str, bytes]]:
        """Rows whose key is below `low` or from `high` on."""

    @abc.abstractmethod
    def _rows_between(
        self, conn: Any, name: str, low: str, high: str | None
    ) -> list[tuple[str, bytes]]:
        """Rows whose key is from `low` up to (not including) `high` (None: no bound)."""

    @abc.abstractmethod
    def _rows_in(self, conn: Any, name: str, keys: list[str]) -> list[tuple[str, bytes]]:
        """The rows of `keys` that exist."""

    @abc.abstractmethod
    def _rows_after(
        self, conn: Any, name: str, low: str, high: str, limit: int
    ) -> list[tuple[str, bytes]]:
        """The first `limit` rows whose key is after `low` and before `high`, in key order."""
