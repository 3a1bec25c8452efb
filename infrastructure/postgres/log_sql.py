"""The SQL of the log in one PostgreSQL schema: its tables, the head lock, inserts, reads.

The schema holds `events` (the columns of the SQLite store; rota payloads are text in
`data`, eventsourcing payloads bytes in `data_bytes`, and the chain hashes exactly the
stored bytes), `head` (one row: last position and hash), `merkle_nodes` (the Merkle tree's
stored nodes, `tree`), `rota_meta` and `tracking`, as
`log_schema.sql` (beside this module, packaged with it) creates them. An append locks
`head` and reads what it decides on in one statement list (`lock`, then the `versions` and
`deliveries` reads, their values one JSON literal), then inserts its rows and moves `head`
in one more (`insert`, or `import_` for rows recorded elsewhere). Every value is bound, or
inlined as a quoted literal (`json_literal`).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import msgspec
import psycopg
from psycopg import sql as pg_sql

from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.log_rows import IMPORTING

SCHEMA_VERSION = 2  # 2: merkle_nodes (`tree`)
# The schedule streams (`schedule/<name>`, `schedules/leader`) have a partial index of their
# own in log order (`events_schedules`), so the schedules projection is folded from their
# events without scanning the log: a read names its predicate literally (`read_prefix`),
# as PostgreSQL uses a partial index only for a query that implies its predicate.
SCHEDULE_PREFIX = "schedule"
SCHEDULE_INDEX = "events_schedules"
EVENT = "position, stream, version, type, type_version, delivery_id, data, data_bytes, recorded_at"
RAW = f"{EVENT}, hash"
_LOCK = (  # clock_timestamp() is read once the lock is held, so times follow positions
    'WITH h AS (SELECT position, hash FROM "{s}".head FOR UPDATE) '
    "SELECT position, hash, clock_timestamp() FROM h"
)
_INSERT = (  # the rows (as binary arrays), the new head and the wake-up, in one statement
    'WITH ins AS (INSERT INTO "{s}".events (' + RAW + ") "
    "SELECT p, st, v, t, tv, d, x, xb, %s, h FROM unnest(%b::bigint[], %b::text[], "
    "%b::bigint[], %b::text[], %b::integer[], %b::text[], %b::text[], %b::bytea[], %b::text[]) "
    "AS u(p, st, v, t, tv, d, x, xb, h)), "
    'upd AS (UPDATE "{s}".head SET position = %s, hash = %s) SELECT pg_notify(%s, %s)'
)
_IMPORT = (  # append_raw: the same, with each row's own recorded_at
    'WITH ins AS (INSERT INTO "{s}".events (' + RAW + ") "
    "SELECT p, st, v, t, tv, d, x, xb, at, h FROM unnest(%b::bigint[], %b::text[], "
    "%b::bigint[], %b::text[], %b::integer[], %b::text[], %b::text[], %b::bytea[], %b::text[], "
    "%b::text[]) AS u(p, st, v, t, tv, d, x, xb, at, h)), "
    'upd AS (UPDATE "{s}".head SET position = %s, hash = %s) SELECT pg_notify(%s, %s)'
)


def json_literal(values: list[str]) -> str:
    """Strings as one SQL string literal holding their JSON array (quoted and escaped)."""
    return pg_sql.Literal(_JSON.encode(values).decode()).as_string(None)


_JSON = msgspec.json.Encoder()


def ddl(s: str) -> pg_sql.Composed:
    """The statements creating the log's tables in schema `s` (`log_schema.sql`, beside this
    module), the schema quoted as an identifier."""
    text = files("rota.infrastructure.postgres").joinpath("log_schema.sql").read_text()
    return pg_sql.SQL(text).format(schema=pg_sql.Identifier(s), genesis=pg_sql.Literal(GENESIS_HEX))


def schedule_index_ddl(s: str) -> pg_sql.Composed:
    """The schedule streams' index (`SCHEDULE_INDEX`) in schema `s`, if it is missing."""
    return pg_sql.SQL(
        "CREATE INDEX IF NOT EXISTS {index} ON {schema}.events (position) "
        "WHERE starts_with(stream, {prefix})"
    ).format(
        index=pg_sql.Identifier(SCHEDULE_INDEX),
        schema=pg_sql.Identifier(s),
        prefix=pg_sql.Literal(SCHEDULE_PREFIX),
    )


def mark_import_in(cursor: psycopg.Cursor[Any], s: str, marker: str | None) -> None:
    """Set (or with None clear) the unfinished import's marker of schema `s`."""
    table = pg_sql.SQL("{schema}.rota_meta").format(schema=pg_sql.Identifier(s))
    cursor.execute(pg_sql.SQL("DELETE FROM {t} WHERE key = %s").format(t=table), (IMPORTING,))
    if marker is not None:
        insert = pg_sql.SQL("INSERT INTO {t} VALUES (%s, %s)").format(t=table)
        cursor.execute(insert, (IMPORTING, marker))


class LogStatements:
    """The statements of the log in schema `s`, formatted once."""

    def __init__(self, s: str) -> None:
        self.schema = s
        self.events_table = f'"{s}".events'
        self.lock = _LOCK.format(s=s)
        self.insert = _INSERT.format(s=s)
        self.import_ = _IMPORT.format(s=s)
        # Read right after the lock, in its round trip: the values are one JSON literal.
        self.versions = (  # each stream's last version (NULL: none), by the unique index
            f'SELECT u.s, (SELECT version FROM "{s}".events e WHERE e.stream = u.s '
            "ORDER BY version DESC LIMIT 1) FROM json_array_elements_text({}::json) AS u(s)"
        )
        self.deliveries = (
            f'SELECT {EVENT} FROM "{s}".events '
            "WHERE delivery_id = ANY(ARRAY(SELECT json_array_elements_text({}::json)))"
        )
