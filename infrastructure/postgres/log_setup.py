"""Opening a PostgreSQL log's schema: create what is missing, upgrade an older one, refuse
a newer one.

A schema with no log is created (`log_sql.ddl`, under the schema's advisory lock, so two
hosts opening it at once create it once). A log created before the schedule streams' index
gets it (one scan of `events`); one created before the Merkle tree (store schema version
1) gets `merkle_nodes` filled from its rows (`tree.upgrade`, under the advisory lock and
the head lock, so no append runs meanwhile) and becomes version 2: once, never at every
open. A schema whose version is newer than this rota's is refused (`schema_too_new`).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from rota.application.errors import PortCode, StoreError
from rota.infrastructure.postgres.log_sql import (
    SCHEDULE_INDEX,
    SCHEMA_VERSION,
    ddl,
    schedule_index_ddl,
)
from rota.infrastructure.postgres.transactions import Tx
from rota.infrastructure.postgres.tree import upgrade
from rota.infrastructure.store_url import store_not_found

if TYPE_CHECKING:
    from rota.infrastructure.postgres.store import PostgresStore

log = logging.getLogger(__name__)
TABLES = ("events", "head", "rota_meta", "tracking", "merkle_nodes")


def _advisory_lock(tx: Tx, s: str) -> None:
    tx.cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"rota {s}",))


def open_schema(store: PostgresStore, *, create: bool) -> None:
    """Create, complete or upgrade the log's schema as the module docstring says."""
    s = store.schema
    names = tuple(f'"{s}".{t}' for t in (*TABLES, SCHEDULE_INDEX))
    found = store._query("SELECT " + ", ".join(["to_regclass(%s)"] * len(names)), names)[0]
    if None in found[: len(TABLES) - 1] and not create:
        raise store_not_found(f"schema {s!r}")
    version = int(store._meta("schema_version") or 0) if found[2] is not None else 0
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"schema {s!r} has store schema version {version}, newer than this rota's "
            f"{SCHEMA_VERSION}: upgrade rota to open it",
            code=PortCode.SCHEMA_TOO_NEW,
        )
    if None in found[: len(TABLES) - 1]:

        def make(tx: Tx) -> None:
            _advisory_lock(tx, s)
            tx.cursor.execute(ddl(s))
            tx.cursor.execute(schedule_index_ddl(s))
            tx.cursor.execute(
                f'INSERT INTO "{s}".rota_meta VALUES (%s, %s), (%s, %s) ON CONFLICT DO NOTHING',
                ("schema_version", str(SCHEMA_VERSION), "store_id", str(uuid.uuid4())),
            )

        store.write(make)
    elif found[-1] is None:
        _add_schedule_index(store)
    if int(store._meta("schema_version") or 0) < SCHEMA_VERSION:
        _upgrade(store)


def _upgrade(store: PostgresStore) -> None:
    """Version 1 to 2: the Merkle tree's nodes, from the rows, under the head lock."""
    s = store.schema

    def body(tx: Tx) -> None:
        _advisory_lock(tx, s)
        tx.head()  # no append runs while the nodes are computed
        version = tx.cursor.execute(
            f'SELECT value FROM "{s}".rota_meta WHERE key = %s', ("schema_version",)
        ).fetchone()
        if version is not None and int(version[0]) >= SCHEMA_VERSION:
            return  # another host upgraded it meanwhile
        tx.cursor.execute(ddl(s))
        upgrade(tx, s)
        tx.cursor.execute(
            f'UPDATE "{s}".rota_meta SET value = %s WHERE key = %s',
            (str(SCHEMA_VERSION), "schema_version"),
        )

    try:
        store.write(body)
    except StoreError as exc:
        log.warning(
            "the log in schema %r predates the Merkle tree and this session could not "
            "upgrade it (%s): tree heads and proofs fail until a writer opens it",
            s,
            type(exc.__cause__ or exc).__name__,
        )


def _add_schedule_index(store: PostgresStore) -> None:
    """Give a log created before it the schedule streams' index (one scan of `events`,
    under the schema's advisory lock). A session that may not create it (a read-only
    role) goes on without it: schedule reads then scan the log, as before."""
    s = store.schema

    def add(tx: Tx) -> None:
        _advisory_lock(tx, s)
        tx.cursor.execute(schedule_index_ddl(s))

    try:
        store.write(add)
    except StoreError as exc:
        log.warning(
            "the log in schema %r has no index of its schedule streams and this session "
            "could not add it (%s): schedule reads scan the log",
            s,
            type(exc.__cause__ or exc).__name__,
        )
