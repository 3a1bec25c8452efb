"""`rota recover-corrupt`: isolate a damaged projection file, then rebuild it from the log.

The projection file is derived: everything in it is a fold of the log. When it is damaged
(`rota doctor` fails `projection_integrity` or `projection_drift`) the guarded recovery is:

1. validate `--backup-name` (the raw value, before any path is built from it) against
   `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`;
2. resolve the store: an SQLite log file (a PostgreSQL store keeps its projections in its
   own schema: `recover_corrupt_postgres` isolates their rows instead of a file), and ask
   its backend for the isolation (`isolate_projections`: it refuses an existing NAME, a
   symlink on the way, a companion that is not a regular file, a missing projection file);
3. refuse while a daemon holds the store: `<log>.lock` (`rota run` holds it shared for its
   lifetime, see `daemon_lock`) or `<projections>.lock` (the scheduler that keeps the file);
4. verify the log read-only (the backend's `check_integrity`, `PRAGMA integrity_check`;
   the hash chain, the newest checkpoint): a damaged log is refused, the advice is a full
   restore from backup;
4b. ask doctor about the projections (`projection_integrity`, `projection_drift`:
   `doctor.projection_health`): when neither fails they are healthy and the recovery is
   refused (`projection_healthy`) unless `force` (`--force`): isolating a sound store
   only forces a rebuild, and the trouble is then elsewhere;
5. (the isolation's `run`, `infrastructure/sqlite/isolation.py`) create
   `diagnostics/scheduler-recovery/` beside the log and `NAME` in it exclusively (`mkdir`,
   never following a symlink: an existing name or a planted link is refused);
6. move the projection file and its `-wal`/`-shm`/`-journal` there (companions first, so
   no stale WAL is ever left beside a new file) with `rename`, or copy, fsync, compare and
   unlink across file systems, then write `manifest.json` (SHA-256 and size of every moved
   file, computed on the moved files) and fsync;
7. rebuild every projection from the log into a fresh file and verify its digests against
   a replay.

Every refusal comes before anything on disk changes; `dry_run` runs every check and
returns the plan. The log is only ever opened read-only: nothing is appended, so no
delivery is fabricated. Rollback: the isolated copy stays where it was moved.
"""

from __future__ import annotations

import os
import re
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import msgspec

from rota.application.errors import PortCode
from rota.application.ports import Clock
from rota.application.timestamps import format_timestamp
from rota.infrastructure.backend import Backend
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.store_url import backend, sqlite_url
from rota.projections import PERSISTED
from rota.replay.daemon_lock import DaemonLock, StoreBusy, held_by_another
from rota.replay.doctor import projection_health
from rota.replay.doctor_report import FULL_RESTORE, guarded
from rota.replay.errors import ReplayCode
from rota.replay.log_checks import check_chain, check_checkpoint, check_log_integrity
from rota.replay.progress import ProgressFactory, silent
from rota.replay.read_only import ReadOnlyLog, fingerprint, integrity, quiescent
from rota.replay.rebuild import RebuildReport, rebuild, verify
from rota.replay.recover_corrupt_postgres import isolated, refusals
from rota.replay.recovery_report import RecoveryRefused, RecoveryReport, refuse_healthy

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def validate_name(raw: object) -> str:
    """The backup name, or `invalid_backup_name` (checked on the raw value)."""
    if isinstance(raw, str) and NAME_RE.fullmatch(raw):
        return raw
    shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:37] + "..."
    raise RecoveryRefused(
        f"--backup-name {shown} is not a plain name: 1-128 letters, digits, '.', '_', '-', "
        "starting with a letter or digit",
        code=ReplayCode.INVALID_BACKUP_NAME,
    )


def _verify_log(
    store: Backend,
    log: Path,
    checkpoint_dir: str | os.PathLike[str] | None,
    progress: ProgressFactory = silent,
) -> tuple[list[str], int]:
    for attempt in range(2):
        before = fingerprint(log)
        calm = attempt == 0 and quiescent(log)
        with ReadOnlyLog(log, immutable=calm) as ro:
            checks = [
                guarded("log_integrity", partial(check_log_integrity, store, calm)),
                guarded("hash_chain", partial(check_chain, ro, progress)),
                guarded("checkpoint", partial(check_checkpoint, ro, checkpoint_dir)),
            ]
            bad = [c for c in checks if c.status == "fail"]
            head = 0 if bad else ro.head().position
        if not calm or fingerprint(log) == before:
            break  # else a writer opened the log while it was read as immutable: again
    if bad:
        found = "; ".join(f"{c.name}: {c.detail}" for c in bad)
        raise RecoveryRefused(f"the log itself fails verification ({found}): {FULL_RESTORE}",
                              code=ReplayCode.LOG_CORRUPT)  # fmt: skip
    return [f"{c.name} {c.status}: {c.detail}" for c in checks], head


def _health(
    log: Path, proj: Path, force: bool, progress: ProgressFactory = silent
) -> tuple[list[str], bool]:
    """Doctor's projection checks on the read-only log and projection file (refused when
    healthy, unless `force`: `refuse_healthy`)."""
    for attempt in range(2):
        before = fingerprint(log), fingerprint(proj)
        calm = attempt == 0 and quiescent(log) and quiescent(proj)
        with ReadOnlyLog(log, immutable=calm) as ro:
            health = projection_health(ro, proj, immutable=calm, progress=progress)
        if not calm or (fingerprint(log), fingerprint(proj)) == before:
            break  # else a writer opened a file while it was read as immutable: again
    return refuse_healthy(health, force)


def _rebuild(
    log: Path, proj: Path, progress: ProgressFactory = silent
) -> tuple[RebuildReport, bool, int]:
    """Rebuild into a fresh file from the read-only log; whether it equals a replay."""
    for attempt in range(2):
        before = fingerprint(log)
        calm = attempt == 0 and quiescent(log)
        with ReadOnlyLog(log, immutable=calm) as ro, SQLiteProjectionStore(proj) as store:
            report = rebuild(ro, store, progress=progress)
            checked = verify(ro, store, progress=progress)
            head = ro.head().position
        stored = {v.name: v for v in checked.projections}
        verified = checked.ok and all(
            stored[k.name].status == "ok" and stored[k.name].stored_digest == report.digests[k.name]
            for k in PERSISTED
        )
        if not calm or fingerprint(log) == before:
            break  # else a writer opened the log while it was read as immutable: again
    return report, verified, head


def recover_corrupt(
    url: str,
    name: object,
    *,
    projections: str | os.PathLike[str] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    force: bool = False,
    clock: Clock | None = None,
    progress: ProgressFactory = silent,
) -> RecoveryReport:
    """Isolate the projection file under `diagnostics/scheduler-recovery/NAME` and rebuild
    it from the log (see the module docstring); raises `RecoveryRefused` (`projection_healthy`
    for projections doctor finds healthy, unless `force`) or `StoreBusy`. `progress` makes
    the bars of its long steps (the hash chain, the rebuild, the verify)."""
    backup_name = validate_name(name)
    chosen = backend(url)
    if chosen.log_file is None:
        if projections is not None:
            raise RecoveryRefused(
                "--projections names a file, but the log is not one: recover-corrupt "
                "isolates the projections in the log's own store; rebuild a file with "
                "'rota replay rebuild --projections FILE'",
                code=PortCode.NOT_SQLITE,
            )
        from rota.replay.recover_corrupt_postgres import recover_corrupt_postgres

        return recover_corrupt_postgres(
            chosen,
            backup_name,
            checkpoint_dir=checkpoint_dir,
            dry_run=dry_run,
            force=force,
            clock=clock,
            progress=progress,
        )
    log = chosen.log_file.absolute()
    if not log.is_file():
        raise RecoveryRefused(f"no log file at {log}", code=ReplayCode.NO_STORE)
    proj = Path(projections).absolute() if projections else default_path(log)
    assert proj is not None
    store = backend(sqlite_url(log))  # (the same file, named by its absolute path)
    with refusals():
        isolation = store.isolate_projections(proj, backup_name)
    for lock in (f"{log}.lock", f"{proj}.lock"):
        if held_by_another(lock):
            raise StoreBusy(
                f"a scheduler holds {lock} ('rota run', or rota.open in a program): stop it first"
            )
    log_checks, head = _verify_log(store, log, checkpoint_dir, progress)
    health, forced = _health(log, proj, force, progress)
    found = integrity(proj, immutable=quiescent(proj))
    planned = isolated(isolation.planned())
    report = RecoveryReport(
        dry_run,
        str(log),
        str(proj),
        isolation.backup,
        planned,
        log_checks,
        found,
        head,
        projection_health=health,
        forced=forced,
    )
    if dry_run:
        return report
    with ExitStack() as stack:
        stack.enter_context(DaemonLock(f"{log}.lock", exclusive=True))
        stack.enter_context(DaemonLock(f"{proj}.lock", exclusive=True))
        with refusals():  # (the manifest is computed on the moved files, in their new place)
            moved = isolation.run(
                {
                    "tool": "rota recover-corrupt",
                    "created_at": format_timestamp((clock or SystemClock()).now()),
                    "store": str(log),
                    "log_head": head,
                    "projection_integrity": found,
                }
            )
        rebuilt, verified, after = _rebuild(log, proj, progress)
    return msgspec.structs.replace(
        report,
        files=isolated(moved),
        manifest=isolation.manifest,
        rebuilt=rebuilt,
        verified=verified,
        log_head_after=after,
    )


__all__ = ["NAME_RE", "recover_corrupt", "validate_name"]
