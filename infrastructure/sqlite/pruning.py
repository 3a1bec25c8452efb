"""SQLite's part of retention: rewrite pruned payloads in place, and give their space back.

A prune's rewrite shrinks the `events` rows; the pages freed go to SQLite's freelist, and
the file shrinks only when they are vacuumed. rota's stores are created with
`auto_vacuum = INCREMENTAL` (set when the file is new, before WAL mode and its first table;
older files are untouched), and retention gives the
freed pages back with `PRAGMA incremental_vacuum(N)` a few pages at a time, each step its
own short write transaction, so the daemon waits at most one step for the write lock.

A file created before this (auto_vacuum NONE) needs one full `VACUUM` to switch it on:
`enable_incremental` does that; it rewrites the whole file and holds the write lock for as
long, so run it with the daemon stopped (`rota retention vacuum --enable`), once.
Without `--enable`, `rota retention vacuum` gives back what is free, in short steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import apsw

from rota.application.ports import StoreSpace

MODES = {0: "none", 1: "full", 2: "incremental"}
BATCH = 500


def incremental_when_new(conn: apsw.Connection) -> None:
    """Set `auto_vacuum = INCREMENTAL` on a file with nothing in it yet (before WAL mode and
    the first table). Only then: on a file that has pages, setting it again rewrites the
    header (full and incremental switch without a VACUUM), which other connections see as
    a commit (`PRAGMA data_version`)."""
    row = conn.execute("PRAGMA page_count").fetchone()
    if row is not None and row[0] == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")


def rewrite(
    cursor: apsw.Cursor, rows: Sequence[tuple[int, bytes]], forget: Callable[[], None]
) -> int:
    """Put each payload in place (inside the store's write transaction)."""
    cursor.executemany("UPDATE events SET data = ? WHERE position = ?", [(p, n) for n, p in rows])
    forget()  # the append's caches may hold rows read before the rewrite
    return len(rows)


def vacuum_step(cursor: apsw.Cursor, pages: int) -> None:
    """Free at most `pages` pages of the freelist (inside a write transaction)."""
    for _ in cursor.execute(f"PRAGMA incremental_vacuum({int(pages)})"):
        pass


def enable_on_path(path: Path) -> None:
    """Switch an existing file to incremental auto-vacuum: one full VACUUM (see the module
    docstring), on a connection of its own, with no other open on the file."""
    conn = apsw.Connection(str(path))
    try:
        conn.setbusytimeout(5000)
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
    finally:
        conn.close()


def storage(cursor: apsw.Cursor, reclaim: int) -> StoreSpace:
    """The file's pages after giving back at most `reclaim` free ones (inside a write)."""
    if reclaim > 0:
        vacuum_step(cursor, reclaim)

    def one(pragma: str) -> int:
        row = cursor.execute(f"PRAGMA {pragma}").fetchone()
        return int(row[0]) if row else 0

    return StoreSpace(
        one("page_size"),
        one("page_count"),
        one("freelist_count"),
        MODES.get(one("auto_vacuum"), "none"),
    )


def space(
    write: Callable[[Callable[[apsw.Cursor], StoreSpace]], StoreSpace],
    reader: Callable[[], apsw.Connection],
    reclaim: int,
) -> StoreSpace:
    """`SQLiteStore.storage`: a read on the thread's reader connection, or with `reclaim`
    a short write transaction that first gives pages back."""
    if reclaim > 0:
        return write(lambda cursor: storage(cursor, reclaim))
    return storage(reader().cursor(), 0)
