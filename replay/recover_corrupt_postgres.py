"""`rota recover-corrupt` on PostgreSQL: isolate the projection rows, rebuild from the log.

The same guarded recovery as on SQLite (`recover_corrupt`), for projections kept in the
log's own store (the backend's `isolate_projections` does the store's part and refuses a
store that keeps none to isolate: in memory, `not_sqlite`):

1. `--backup-name` is validated on the raw value (by the caller);
2. the projection tables must exist (else `no_projection_store`) and the backup name must
   be new (`backup_exists`): the backend's `isolate_projections` refuses;
3. the projections' writer lock (the advisory lock the scheduler keeping them holds) is
   taken for the whole recovery: refused (`store_busy`) while a scheduler keeps them, and
   no scheduler starts keeping them meanwhile;
4. the log is verified (hash chain, newest checkpoint): a damaged log is refused
   (`log_corrupt`), the advice is a full restore; then doctor's `projection_integrity` and
   `projection_drift` are asked: projections they find healthy are refused
   (`projection_healthy`) unless `force`;
5. every projection row moves, in one transaction, into `rota_projection_recovery` under
   the backup name, with a manifest row (rows, bytes and SHA-256 per table; the
   isolation's `run`, `infrastructure.postgres.projection_recovery`);
6. every projection is rebuilt from the log and verified against a replay.

Every refusal comes before anything is written; `dry_run` runs every check and returns the
plan. The log's tables are only read: nothing is appended, so no delivery is fabricated.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import Clock, EventStore, ProjectionStore
from rota.application.timestamps import format_timestamp
from rota.infrastructure.backend import Backend, IsolatedCopy, Isolation, IsolationRefused
from rota.infrastructure.clock import SystemClock
from rota.projections import PERSISTED
from rota.replay.daemon_lock import StoreBusy
from rota.replay.doctor import projection_health
from rota.replay.doctor_report import FULL_RESTORE, guarded
from rota.replay.errors import ReplayCode
from rota.replay.log_checks import check_chain, check_checkpoint
from rota.replay.progress import ProgressFactory, silent
from rota.replay.rebuild import rebuild, verify
from rota.replay.recovery_report import (
    IsolatedFile,
    RecoveryRefused,
    RecoveryReport,
    refuse_healthy,
)


@contextmanager
def refusals() -> Iterator[None]:
    """A backend's `IsolationRefused` as recover-corrupt's `RecoveryRefused` (same code
    and message: nothing was changed)."""
    try:
        yield
    except IsolationRefused as exc:
        raise RecoveryRefused(exc.message, code=exc.code) from None


def isolated(copies: list[IsolatedCopy]) -> list[IsolatedFile]:
    """The report's lines of what an isolation moves (or moved)."""
    return [IsolatedFile(c.name, c.original, c.size, c.sha256) for c in copies]


def _verify_log(
    log: EventStore,
    checkpoint_dir: str | os.PathLike[str] | None,
    progress: ProgressFactory = silent,
) -> list[str]:
    checks = [
        guarded("hash_chain", lambda: check_chain(log, progress)),
        guarded("checkpoint", lambda: check_checkpoint(log, checkpoint_dir)),
    ]
    bad = [c for c in checks if c.status == "fail"]
    if bad:
        found = "; ".join(f"{c.name}: {c.detail}" for c in bad)
        raise RecoveryRefused(
            f"the log itself fails verification ({found}): {FULL_RESTORE}",
            code=ReplayCode.LOG_CORRUPT,
        )
    return [f"{c.name} {c.status}: {c.detail}" for c in checks]


def recover_corrupt_postgres(
    found: Backend,
    backup_name: str,
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    force: bool = False,
    clock: Clock | None = None,
    progress: ProgressFactory = silent,
) -> RecoveryReport:
    """Isolate the projection rows of the store `found` opens (its projections kept in
    the log's own store) under `backup_name` and rebuild them from the log (see the module
    docstring). Only PostgreSQL keeps such rows to isolate: an in-memory store's
    projections die with the process, and its backend refuses them (`not_sqlite`)."""
    with found.open_log() as log:
        try:
            tables = found.projections_beside(log, must_exist=True)
        except ProjectionStoreError as exc:
            if exc.code != PortCode.NO_PROJECTION_STORE:
                raise
            raise RecoveryRefused(
                f"{exc}: nothing to isolate", code=PortCode.NO_PROJECTION_STORE
            ) from None
        try:
            with refusals():
                isolation = found.isolate_projections(tables, backup_name)
            assert tables is not None  # (a store with none has nothing to isolate)
            return _recover(log, tables, isolation, checkpoint_dir, dry_run, force, clock, progress)
        finally:
            if tables is not None:
                tables.close()  # (releases the writer lock with the session)


def _recover(
    log: EventStore,
    tables: ProjectionStore,
    isolation: Isolation,
    checkpoint_dir: str | os.PathLike[str] | None,
    dry_run: bool,
    force: bool,
    clock: Clock | None,
    progress: ProgressFactory = silent,
) -> RecoveryReport:
    if not tables.writer_lock().acquire():
        raise StoreBusy(
            f"a scheduler keeps the projections in {tables.where} (it holds their writer "
            "lock: 'rota run', or rota.open in a program): stop it first"
        )
    log_checks = _verify_log(log, checkpoint_dir, progress)
    health, forced = refuse_healthy(
        projection_health(log, tables, immutable=False, progress=progress), force
    )
    head = log.head().position
    planned = isolation.planned()
    report = RecoveryReport(
        dry_run=dry_run,
        store=tables.where,
        projections=f"{tables.where}: rota_projection_* tables",
        backup=isolation.backup,
        files=isolated(planned),
        log_checks=log_checks,
        projection_integrity=[f"{c.name}: {c.rows} rows read" for c in planned],
        log_head_before=head,
        projection_health=health,
        forced=forced,
    )
    if dry_run:
        return report
    manifest: dict[str, object] = {
        "tool": "rota recover-corrupt",
        "created_at": format_timestamp((clock or SystemClock()).now()),
        "store": tables.where,
        "log_head": head,
    }
    with refusals():
        moved = isolation.run(manifest)
    rebuilt = rebuild(log, tables, progress=progress)
    checked = verify(log, tables, progress=progress)
    stored = {v.name: v for v in checked.projections}
    verified = checked.ok and all(
        stored[k.name].status == "ok" and stored[k.name].stored_digest == rebuilt.digests[k.name]
        for k in PERSISTED
    )
    return msgspec.structs.replace(
        report,
        files=isolated(moved),
        manifest=isolation.manifest,
        rebuilt=rebuilt,
        verified=verified,
        log_head_after=log.head().position,
    )


__all__ = ["isolated", "recover_corrupt_postgres", "refusals"]
