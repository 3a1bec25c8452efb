"""Moving a projection file and its companions into a backup directory, with a manifest.

What `SQLiteBackend.isolate_projections` does for `rota recover-corrupt` (which guards it:
the daemon locks, the log's verification, the rebuild). The directories are created beside
the log (`diagnostics/scheduler-recovery/NAME`, NAME exclusively, never through a symlink);
each file moves by `rename`, or across file systems by copy, fsync, SHA-256 comparison and
unlink; `manifest.json` records the size and SHA-256 of every moved file, computed on the
moved files. Everything works on directory file descriptors, so no path is followed twice.
Every refusal (`IsolationRefused`) comes before anything on disk changes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from contextlib import ExitStack
from pathlib import Path

import msgspec

from rota.application.errors import PortCode
from rota.domain.errors import RotaError
from rota.infrastructure.backend import IsolatedCopy, Isolation, IsolationRefused

RECOVERY_DIR = ("diagnostics", "scheduler-recovery")
COMPANIONS = ("-wal", "-shm", "-journal")  # moved before the file itself
CHUNK = 1 << 20


def sha256_at(name: str, dir_fd: int) -> tuple[int, str]:
    """Size and SHA-256 of `name` in the directory `dir_fd` (-1: a path)."""
    at = None if dir_fd < 0 else dir_fd
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as src:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def precheck_target(base: Path, name: str) -> Path:
    """Refuse a backup directory that exists or a path through a symlink (touches nothing)."""
    path = base
    for part in (*RECOVERY_DIR, name):
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return base.joinpath(*RECOVERY_DIR, name)
        if part == name:
            raise IsolationRefused(
                f"{path} already exists: choose a new name", code=PortCode.BACKUP_EXISTS
            )
        if not stat.S_ISDIR(mode):
            raise IsolationRefused(
                f"{path} is a symlink or not a directory", code=PortCode.UNSAFE_PATH
            )
    return path


def planned_files(proj: Path) -> list[Path]:
    """The projection file and its companions that exist, companions first; each regular."""
    found = [Path(f"{proj}{s}") for s in COMPANIONS] + [proj]
    found = [p for p in found if os.path.lexists(p)]
    for path in found:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise IsolationRefused(f"{path} is not a regular file", code=PortCode.UNSAFE_PATH)
    return found


def make_target(stack: ExitStack, base: Path, name: str) -> int:
    """Create the recovery directories (NAME exclusively); the fd of NAME."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stack.callback(os.close, fd)
    for part in (*RECOVERY_DIR, name):
        try:
            os.mkdir(part, 0o700 if part == name else 0o755, dir_fd=fd)
        except FileExistsError:
            if part == name:
                raise IsolationRefused(
                    f"{name} already exists", code=PortCode.BACKUP_EXISTS
                ) from None
        try:
            fd = os.open(part, flags, dir_fd=fd)
        except OSError as exc:
            raise IsolationRefused(
                f"{part} is not a plain directory: {exc}", code=PortCode.UNSAFE_PATH
            ) from None
        stack.callback(os.close, fd)
    return fd


def move_file(name: str, src_fd: int, dst_fd: int) -> None:
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
    if sha256_at(name, src_fd) != sha256_at(name, dst_fd):
        raise RotaError(
            f"the copy of {name} differs from it: not removed", code=PortCode.COPY_FAILED
        )
    os.unlink(name, dir_fd=src_fd)


def write_manifest(dst_fd: int, manifest: dict[str, object]) -> None:
    """Write `manifest.json` into the directory `dst_fd` (exclusively) and fsync both."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("manifest.json", flags, 0o600, dir_fd=dst_fd)
    with os.fdopen(fd, "wb") as out:
        out.write(msgspec.json.format(msgspec.json.encode(manifest)) + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.fsync(dst_fd)


class FileIsolation(Isolation):
    """The projection file `proj` (and its companions) to move into
    `<base>/diagnostics/scheduler-recovery/NAME`; refused at once when NAME exists, a path
    is a symlink or not a plain file or directory, or there is no projection file."""

    def __init__(self, base: Path, proj: Path, name: str) -> None:
        self.base, self.proj, self.name = base, proj, name
        target = precheck_target(base, name)
        self.files = planned_files(proj)
        if proj not in self.files:
            raise IsolationRefused(
                f"no projection file at {proj}: nothing to isolate ('rota replay rebuild' "
                "creates one)",
                code=PortCode.NO_PROJECTION_STORE,
            )
        self.backup, self.manifest = str(target), str(target / "manifest.json")

    def planned(self) -> list[IsolatedCopy]:
        return [IsolatedCopy(p.name, str(p), *sha256_at(str(p), -1)) for p in self.files]

    def run(self, manifest: dict[str, object]) -> list[IsolatedCopy]:
        """Create NAME, move the files (companions first), fsync both directories, then
        write `manifest` with the moved files (`files`, computed in their new directory)."""
        with ExitStack() as stack:
            dst_fd = make_target(stack, self.base, self.name)
            src_fd = os.open(self.proj.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            stack.callback(os.close, src_fd)
            for path in self.files:
                move_file(path.name, src_fd, dst_fd)
            os.fsync(dst_fd)
            os.fsync(src_fd)
            moved = [IsolatedCopy(p.name, str(p), *sha256_at(p.name, dst_fd)) for p in self.files]
            files = [{k: v for k, v in c._asdict().items() if k != "rows"} for c in moved]
            write_manifest(dst_fd, {**manifest, "files": files})
        return moved


__all__ = [
    "RECOVERY_DIR",
    "FileIsolation",
    "make_target",
    "move_file",
    "planned_files",
    "precheck_target",
    "sha256_at",
    "write_manifest",
]
