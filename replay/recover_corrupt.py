"""`rota recover-corrupt`: isolate a damaged projection file, then rebuild it from the log.

The projection file is derived: everything in it is a fold of the log. When it is damaged
(`rota doctor` fails `projection_integrity` or `projection_drift`) the guarded recovery is:

1. validate `--backup-name` (the raw value, before any path is built from it) against
   `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`;
2. resolve the store: an SQLite log file (a PostgreSQL store keeps its projections in its
   own schema: `recover_corrupt_pg` isolates their rows instead of a file);
3. refuse while a daemon holds the store: `<log>.lock` (`rota run` holds it shared for its
   lifetime, see `DaemonLock`) or `<projections>.lock` (the scheduler that keeps the file);
4. verify the log read-only (`PRAGMA integrity_check`, the hash chain, the newest
   checkpoint): a damaged log is refused, the advice is a full restore from backup;
5. create `diagnostics/scheduler-recovery/` beside the log and `NAME` in it exclusively
   (`mkdir`, never following a symlink: an existing name or a planted link is refused);
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

import errno
import fcntl
import hashlib
import os
import re
import stat
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import msgspec

from rota.application.errors import PortCode
from rota.application.ports import Clock, EventStore
from rota.application.timestamps import format_timestamp
from rota.domain.errors import RotaError
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import sqlite_path
from rota.projections import PERSISTED
from rota.replay.doctor import (
    FULL_RESTORE,
    ReadOnlyLog,
    check_chain,
    check_checkpoint,
    check_log_integrity,
    fingerprint,
    guarded,
    integrity,
    quiescent,
)
from rota.replay.errors import ReplayCode
from rota.replay.rebuild import RebuildReport, rebuild, verify

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RECOVERY_DIR = ("diagnostics", "scheduler-recovery")
COMPANIONS = ("-wal", "-shm", "-journal")  # moved before the file itself
CHUNK = 1 << 20


class RecoveryRefused(RotaError):
    code = ReplayCode.RECOVERY_REFUSED


class StoreBusy(RotaError):
    code = ReplayCode.STORE_BUSY


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


# -- the daemon lock ----------------------------------------------------------------------


class DaemonLock:
    """`<log>.lock`, an flock: `rota run` holds it shared for its lifetime (racing daemons
    share it), recover-corrupt exclusively (refused while any daemon holds it). The lock
    dies with the process; the file stays (removing it would race)."""

    def __init__(self, path: str | os.PathLike[str] | None, *, exclusive: bool = False) -> None:
        self.path = None if path is None else Path(path)
        self.exclusive = exclusive
        self._fd: int | None = None

    @classmethod
    def for_store(
        cls, store: EventStore | str | os.PathLike[str], *, exclusive: bool = False
    ) -> DaemonLock:
        """The lock of a store (an opened store or its URL); a no-op one for PostgreSQL."""
        if isinstance(store, EventStore):
            path = getattr(store, "path", None)
            return cls(None if path is None else f"{path}.lock", exclusive=exclusive)
        url = os.fspath(store)
        if url.startswith(("postgresql://", "postgres://")):
            return cls(None, exclusive=exclusive)
        return cls(f"{sqlite_path(url)}.lock", exclusive=exclusive)

    def acquire(self) -> DaemonLock:
        if self.path is None or self._fd is not None:
            return self
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:  # a symlink planted there, a read-only directory ...
            raise StoreBusy(f"cannot open the lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if self.exclusive:
                raise StoreBusy(f"a daemon holds {self.path}: stop 'rota run' first") from None
            raise StoreBusy(
                f"recover-corrupt holds {self.path}: wait for it to finish, then start again"
            ) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None

    def __enter__(self) -> DaemonLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_by_another(path: str | os.PathLike[str]) -> bool:
    """Whether some open file holds the flock on `path` (never creates the file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a symlink or an unreadable lock: treat as held
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the probe's lock
    return False


# -- the report ---------------------------------------------------------------------------


class IsolatedFile(msgspec.Struct):
    name: str
    original: str
    size: int
    sha256: str


class RecoveryReport(msgspec.Struct):
    dry_run: bool
    store: str
    projections: str
    backup: str
    files: list[IsolatedFile]
    log_checks: list[str]
    projection_integrity: list[str]
    log_head_before: int
    log_head_after: int | None = None
    manifest: str | None = None
    rebuilt: RebuildReport | None = None
    verified: bool | None = None
    appended: int = 0

    def lines(self) -> list[str]:
        if self.dry_run:
            out = ["dry run: nothing was changed"]
            out += [f"  log: {line}" for line in self.log_checks]
            out.append(f"  projection file: {'; '.join(self.projection_integrity)}")
            out.append(f"  would create {self.backup} and move into it:")
        else:
            manifest = self.manifest or "manifest.json"
            shown = "manifest.json" if manifest.endswith("manifest.json") else manifest
            out = [f"isolated {len(self.files)} file(s) into {self.backup} ({shown}):"]
        out += [f"    {f.name}  {f.size} bytes  sha256 {f.sha256}" for f in self.files]
        if self.dry_run or self.rebuilt is None:
            out.append(
                f"  then rebuild every projection from the log (head {self.log_head_before})"
            )
            return out
        names = ", ".join(self.rebuilt.projections)
        verdict = "digests equal a replay" if self.verified else "NOT VERIFIED"
        out.append(f"rebuilt {names} at position {self.rebuilt.position}: {verdict}")
        out.append(
            f"the log was only read: head {self.log_head_before} before, "
            f"{self.log_head_after} after; nothing appended"
        )
        return out


# -- the steps ----------------------------------------------------------------------------


def _sha256_at(name: str, dir_fd: int) -> tuple[int, str]:
    """Size and SHA-256 of `name` in the directory `dir_fd` (-1: a path)."""
    at = None if dir_fd < 0 else dir_fd
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as src:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _planned(proj: Path) -> list[Path]:
    found = [Path(f"{proj}{s}") for s in COMPANIONS] + [proj]
    found = [p for p in found if os.path.lexists(p)]
    for path in found:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise RecoveryRefused(f"{path} is not a regular file", code=ReplayCode.UNSAFE_PATH)
    return found


def _precheck_target(base: Path, name: str) -> Path:
    """Refuse a backup directory that exists or a path through a symlink (touches nothing)."""
    path = base
    for part in (*RECOVERY_DIR, name):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return base.joinpath(*RECOVERY_DIR, name)
        if part == name:
            raise RecoveryRefused(
                f"{path} already exists: choose a new name", code=PortCode.BACKUP_EXISTS
            )
        if not stat.S_ISDIR(mode):
            raise RecoveryRefused(
                f"{path} is a symlink or not a directory", code=ReplayCode.UNSAFE_PATH
            )
    return path


def _make_target(stack: ExitStack, base: Path, name: str) -> int:
    """Create the recovery directories (NAME exclusively); the fd of NAME."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stack.callback(os.close, fd)
    for part in (*RECOVERY_DIR, name):
        try:
            os.mkdir(part, 0o700 if part == name else 0o755, dir_fd=fd)
        except FileExistsError:
            if part == name:
                raise RecoveryRefused(
                    f"{name} already exists", code=PortCode.BACKUP_EXISTS
                ) from None
        try:
            fd = os.open(part, flags, dir_fd=fd)
        except OSError as exc:
            raise RecoveryRefused(
                f"{part} is not a plain directory: {exc}", code=ReplayCode.UNSAFE_PATH
            ) from None
        stack.callback(os.close, fd)
    return fd


def _move(name: str, src_fd: int, dst_fd: int) -> None:
    """Rename `name` into the target directory; across file systems copy, fsync, compare
    the SHA-256 of the copy with the source's, then unlink the source."""
    try:
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    src = os.open(name, flags, dir_fd=src_fd)
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst_fd)
    with os.fdopen(src, "rb") as reader, os.fdopen(out, "wb") as writer:
        while chunk := reader.read(CHUNK):
            writer.write(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    if _sha256_at(name, src_fd) != _sha256_at(name, dst_fd):
        raise RotaError(
            f"the copy of {name} differs from it: not removed", code=ReplayCode.COPY_FAILED
        )
    os.unlink(name, dir_fd=src_fd)


def _write_manifest(dst_fd: int, manifest: dict[str, object]) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("manifest.json", flags, 0o600, dir_fd=dst_fd)
    with os.fdopen(fd, "wb") as out:
        out.write(msgspec.json.format(msgspec.json.encode(manifest)) + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.fsync(dst_fd)


def _verify_log(log: Path, checkpoint_dir: str | os.PathLike[str] | None) -> tuple[list[str], int]:
    for attempt in range(2):
        before = fingerprint(log)
        calm = attempt == 0 and quiescent(log)
        with ReadOnlyLog(log, immutable=calm) as ro:
            checks = [
                guarded("log_integrity", partial(check_log_integrity, log, calm)),
                guarded("hash_chain", partial(check_chain, ro)),
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


def _rebuild(log: Path, proj: Path) -> tuple[RebuildReport, bool, int]:
    """Rebuild into a fresh file from the read-only log; whether it equals a replay."""
    for attempt in range(2):
        before = fingerprint(log)
        calm = attempt == 0 and quiescent(log)
        with ReadOnlyLog(log, immutable=calm) as ro, SQLiteProjectionStore(proj) as store:
            report = rebuild(ro, store)
            checked = verify(ro, store)
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
    clock: Clock | None = None,
) -> RecoveryReport:
    """Isolate the projection file under `diagnostics/scheduler-recovery/NAME` and rebuild
    it from the log (see the module docstring); raises `RecoveryRefused` or `StoreBusy`."""
    backup_name = validate_name(name)
    if url.startswith(("postgresql://", "postgres://")):
        if projections is not None:
            raise RecoveryRefused(
                "--projections names a file, but the log is PostgreSQL: recover-corrupt "
                "isolates the projections in the log's schema; rebuild a file with "
                "'rota replay rebuild --projections FILE'",
                code=ReplayCode.NOT_SQLITE,
            )
        from rota.replay.recover_corrupt_postgres import recover_corrupt_postgres

        return recover_corrupt_postgres(
            url, backup_name, checkpoint_dir=checkpoint_dir, dry_run=dry_run, clock=clock
        )
    log = sqlite_path(url).absolute()
    if not log.is_file():
        raise RecoveryRefused(f"no log file at {log}", code=ReplayCode.NO_STORE)
    proj = Path(projections).absolute() if projections else default_path(log)
    assert proj is not None
    target = _precheck_target(log.parent, backup_name)
    files = _planned(proj)
    if proj not in files:
        raise RecoveryRefused(
            f"no projection file at {proj}: nothing to isolate ('rota replay rebuild' creates one)",
            code=PortCode.NO_PROJECTION_STORE,
        )
    for lock in (f"{log}.lock", f"{proj}.lock"):
        if held_by_another(lock):
            raise StoreBusy(
                f"a scheduler holds {lock} ('rota run', or rota.open in a program): stop it first"
            )
    log_checks, head = _verify_log(log, checkpoint_dir)
    found = integrity(proj, immutable=quiescent(proj))
    planned = [IsolatedFile(p.name, str(p), *_sha256_at(str(p), -1)) for p in files]
    report = RecoveryReport(
        dry_run, str(log), str(proj), str(target), planned, log_checks, found, head
    )
    if dry_run:
        return report
    with ExitStack() as stack:
        stack.enter_context(DaemonLock(f"{log}.lock", exclusive=True))
        stack.enter_context(DaemonLock(f"{proj}.lock", exclusive=True))
        dst_fd = _make_target(stack, log.parent, backup_name)
        src_fd = os.open(proj.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        stack.callback(os.close, src_fd)
        for path in files:
            _move(path.name, src_fd, dst_fd)
        os.fsync(dst_fd)
        os.fsync(src_fd)
        moved = []
        for path in files:
            size, digest = _sha256_at(path.name, dst_fd)
            moved.append(IsolatedFile(path.name, str(path), size, digest))
        # (the manifest is computed on the moved files, in their new directory)
        _write_manifest(
            dst_fd,
            {
                "tool": "rota recover-corrupt",
                "created_at": format_timestamp((clock or SystemClock()).now()),
                "store": str(log),
                "log_head": head,
                "projection_integrity": found,
                "files": msgspec.to_builtins(moved),
            },
        )
        rebuilt, verified, after = _rebuild(log, proj)
    return msgspec.structs.replace(
        report,
        files=moved,
        manifest=str(target / "manifest.json"),
        rebuilt=rebuilt,
        verified=verified,
        log_head_after=after,
    )


__all__ = [
    "NAME_RE",
    "DaemonLock",
    "IsolatedFile",
    "RecoveryRefused",
    "RecoveryReport",
    "StoreBusy",
    "held_by_another",
    "recover_corrupt",
    "validate_name",
]
