"""The SQLite log file: where a store URL puts it, its tables, and creating or checking them.

`events` holds the log (one row per event, with its hash), `merkle_nodes` its Merkle tree's
stored nodes (`sqlite.tree`), `rota_meta` the store's schema version and id, `tracking` what
eventsourcing followers have processed. A file whose schema version is newer than this
rota's is refused, never taken over. Version 2 added `merkle_nodes`: a version 1 store gets
it, filled from its rows, when a writer first opens it (`tree.upgrade`, in that open's
transaction), and a rota that predates the tree refuses the upgraded file (it would append
without keeping the tree).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Literal

import apsw

from rota.application.errors import PortCode, StoreError
from rota.infrastructure.sqlite.tree import NODES_SCHEMA, upgrade
from rota.infrastructure.store_url import SqliteURL, parse, sqlite_url, store_not_found

SCHEMA_VERSION = 2
Synchronous = Literal["full", "normal", "extra"]

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS events (
    position     INTEGER PRIMARY KEY,
    stream       TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    type         TEXT    NOT NULL,
    type_version INTEGER NOT NULL,
    delivery_id  TEXT,
    data         BLOB    NOT NULL,
    recorded_at  TEXT    NOT NULL,
    hash         TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_stream_version ON events (stream, version);
CREATE UNIQUE INDEX IF NOT EXISTS events_delivery_id ON events (delivery_id)
    WHERE delivery_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_schedules ON events (position)
    WHERE stream >= 'schedule' AND stream < 'schedulf';
CREATE TABLE IF NOT EXISTS rota_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
    + NODES_SCHEMA
    + """
CREATE TABLE IF NOT EXISTS tracking (
    application_name TEXT PRIMARY KEY,
    notification_id  INTEGER NOT NULL
);
"""
)

# The schedule streams (`schedule/<name>`, `schedules/leader`) have an index of their own, in
# log order (`events_schedules`, partial: no other append maintains it), so the schedules
# projection is folded from their events without scanning the whole log (`read_prefix`).
# A store created before it gets it when a writer next opens it (one scan of the log).
SCHEDULE_RANGE = ("schedule", "schedulf")

COLUMNS = "position, stream, version, type, type_version, delivery_id, data, recorded_at, hash"
INSERT = f"INSERT INTO events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


def sqlite_path(url: str) -> Path:
    """The file a `sqlite:` URL (or a bare path) names (`store_url.parse`: `sqlite:///relative`,
    `sqlite:////absolute`, a bare path).

    A `sqlite:///x` URL that names no file while `/x` (what it meant in earlier versions of
    rota) exists is refused with `store_url_moved`, never read or created as a new store.
    """
    parsed = parse(url)
    if not isinstance(parsed, SqliteURL):
        raise StoreError(
            "a postgresql:// URL does not name an SQLite file", code=PortCode.INVALID_STORE_URL
        )
    old = parsed.old_meaning
    if old is not None and not parsed.path.exists() and old.exists():
        raise StoreError(
            f"store URL {url!r} now names {parsed.path} (relative to the working directory, as "
            f"in SQLAlchemy), which does not exist; earlier versions of rota read it as "
            f"{old}, which does: write {sqlite_url(old)!r} (four slashes) for that file, or "
            f"{sqlite_url(parsed.path.absolute())!r} for a new store here",
            code=PortCode.STORE_URL_MOVED,
        )
    return parsed.path


def check_file(path: Path, *, create: bool) -> None:
    """Refuse, before anything is written to it, a file that is not a rota store: another
    program's database (`not_a_rota_store`), or (without `create`) a missing or empty file
    (`store_not_found`). A file SQLite cannot read is left to the store's own open."""
    if not path.is_file() or path.stat().st_size == 0:
        if not create:
            raise store_not_found(str(path))
        return
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            found = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {str(row[0]) for row in found}
        finally:
            conn.close()
    except apsw.Error:
        return
    refuse_foreign(tables, path, create=create)


def refuse_foreign(tables: set[str], path: Path, *, create: bool) -> None:
    """`not_a_rota_store` for tables without `rota_meta`; `store_not_found` for none
    (unless `create`)."""
    if "rota_meta" in tables:
        return
    if tables:
        raise StoreError(
            f"{path} is an SQLite database but not a rota store (it has tables "
            f"{', '.join(sorted(tables)[:5])} and no rota_meta): rota does not take it over",
            code=PortCode.NOT_A_ROTA_STORE,
        )
    if not create:
        raise store_not_found(str(path))


def create_schema(cursor: apsw.Cursor, path: Path, *, create: bool = True) -> None:
    """Create the tables (if missing) and the store's meta; refuse a newer schema version.

    A file that holds tables but no `rota_meta` is another program's database: refused
    (`not_a_rota_store`), never taken over. Without `create`, a file with no rota store in
    it is `store_not_found` and nothing is written.
    """
    found = cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    tables = {str(row[0]) for row in found}
    refuse_foreign(tables, path, create=create)
    row = None
    if "rota_meta" in tables:
        row = cursor.execute("SELECT value FROM rota_meta WHERE key = 'schema_version'").fetchone()
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        raise StoreError(
            f"the store at {path} has schema version {row[0]}, newer than this "
            f"rota's {SCHEMA_VERSION}: upgrade rota to open it",
            code=PortCode.SCHEMA_TOO_NEW,
        )
    cursor.execute(SCHEMA)
    if row is None:
        cursor.execute(
            "INSERT INTO rota_meta (key, value) VALUES ('schema_version', ?), ('store_id', ?)",
            (str(SCHEMA_VERSION), str(uuid.uuid4())),
        )
    elif int(row[0]) < SCHEMA_VERSION or "merkle_nodes" not in tables:
        upgrade(cursor)  # version 1: the Merkle tree's nodes, from the rows (once)
        cursor.execute(
            "UPDATE rota_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
        )
