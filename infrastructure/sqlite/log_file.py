"""The SQLite log file: where a store URL puts it, its tables, and creating or checking them.

`events` holds the log (one row per event, with its hash), `rota_meta` the store's schema
version and id, `tracking` what eventsourcing followers have processed. A file whose
schema version is newer than this rota's is refused, never taken over.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Literal

import apsw

from rota.application.errors import PortCode, StoreError

SCHEMA_VERSION = 1
Synchronous = Literal["full", "normal", "extra"]

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS rota_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tracking (
    application_name TEXT PRIMARY KEY,
    notification_id  INTEGER NOT NULL
);
"""

COLUMNS = "position, stream, version, type, type_version, delivery_id, data, recorded_at, hash"
INSERT = f"INSERT INTO events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


def sqlite_path(url: str) -> Path:
    """The file a `sqlite:` URL (or a bare path) names.

    `sqlite:///var/lib/rota/rota.db` is the absolute path `/var/lib/rota/rota.db`;
    `sqlite:rota.db` and `rota.db` are relative to the working directory.
    """
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
    elif url.startswith("sqlite:"):
        path = url[len("sqlite:") :]
    else:
        path = url
    if not path or path == ":memory:":
        raise StoreError(
            f"store URL {url!r} names no file: rota's SQLite store needs a file path "
            "(an in-memory database cannot be shared by the scheduler's connections)",
            code=PortCode.INVALID_STORE_URL,
        )
    return Path(path)


def create_schema(cursor: apsw.Cursor, path: Path) -> None:
    """Create the tables (if missing) and the store's meta; refuse a newer schema version."""
    cursor.execute(SCHEMA)
    row = cursor.execute("SELECT value FROM rota_meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        cursor.execute(
            "INSERT INTO rota_meta (key, value) VALUES ('schema_version', ?), ('store_id', ?)",
            (str(SCHEMA_VERSION), str(uuid.uuid4())),
        )
    elif int(row[0]) > SCHEMA_VERSION:
        raise StoreError(
            f"the store at {path} has schema version {row[0]}, newer than this "
            f"rota's {SCHEMA_VERSION}: upgrade rota to open it",
            code=PortCode.SCHEMA_TOO_NEW,
        )
