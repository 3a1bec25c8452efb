"""Reading an SQLite file so that nothing can write it: the doctor's and recover-corrupt's way in.

Files are opened with `SQLITE_OPEN_READONLY`, never through a writer. A file with no
`-wal`/`-shm` beside it is open nowhere (a WAL connection always keeps its `-shm`), so it
can be read with `immutable=1`, which creates no companion file; `fingerprint` shows whether
a writer opened it meanwhile (then the caller reads again with ordinary read-only
connections, which, like any WAL reader, share the writer's `-wal`/`-shm`). `integrity` is
SQLite's full `PRAGMA integrity_check` through such a connection (what
`SQLiteBackend.check_integrity` answers; the read-only log and projection stores built on
these connections are `rota.replay.read_only`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw

COMPANIONS = ("-wal", "-shm", "-journal")


def quiescent(path: Path) -> bool:
    """No `-wal`, `-shm` or `-journal` beside the file: no connection has it open now."""
    return not any(os.path.lexists(f"{path}{suffix}") for suffix in COMPANIONS)


def fingerprint(path: Path) -> tuple[Any, ...]:
    """What changes when anyone writes the file or opens it in WAL mode."""
    found: list[Any] = []
    for suffix in ("", *COMPANIONS):
        try:
            st = os.lstat(f"{path}{suffix}")
        except FileNotFoundError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def connect_readonly(path: Path, *, immutable: bool) -> apsw.Connection:
    """A connection that cannot write the file (`immutable`: nor create its companions)."""
    uri = f"file://{quote(os.path.abspath(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.setbusytimeout(30_000)
    return conn


def integrity(path: Path, *, immutable: bool) -> list[str]:
    """SQLite's full `PRAGMA integrity_check` (`["ok"]` when sound)."""
    try:
        conn = connect_readonly(path, immutable=immutable)
        try:
            return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        finally:
            conn.close()
    except apsw.Error as exc:
        return [f"cannot be read as a database: {exc}"]


__all__ = ["COMPANIONS", "connect_readonly", "fingerprint", "integrity", "quiescent"]
