"""Whole-or-nothing file writes: a tmp file beside the target, fsynced, renamed into place.

A reader (or a crash) sees the old file or the complete new one, never a part. The tmp
name carries the process and thread, so concurrent writers of one target do not share it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_write(
    target: str | os.PathLike[str], *, mode: int = 0o666, sync_directory: bool = False
) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `target` once the block ends without an exception.

    The tmp file is created with `mode` (less the umask) and removed if the block raises.
    `sync_directory` also fsyncs the directory after the rename, so the rename itself
    survives a power cut.
    """
    path = Path(target)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_directory:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
