"""The PostgreSQL log's Merkle tree: `merkle_nodes`, kept under the appends' head lock.

`merkle_nodes(level, idx, hash)` holds the stored nodes `rota.infrastructure.merkle`
describes (every complete subtree of >= 256 leaves); the leaves are `events.hash`. An
append or import computes the nodes it completes under the head lock (`completed`: no
read unless a block of 256 leaves completes, then one read of that block's earlier hashes
and one of the left siblings) and sends their INSERT with its own, before COMMIT. A schema
created by a rota before the tree existed (store schema version 1) gets its nodes once, in
the upgrade its first writer runs (`upgrade`: under the schema's advisory lock and the head
lock, one scan of `events`), never at open afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psycopg import errors as pg_errors

from rota.application.errors import StoreError
from rota.infrastructure.merkle import Key, Node, build, completed
from rota.infrastructure.postgres.transactions import Tx

PREDATES = "this schema predates the Merkle tree: a writer's first open upgrades it"
Query = Callable[[str, Sequence[Any]], list[Any]]


class PgNodes:
    """The tree's `merkle.NodeSource` in schema `s` over a query function (the pool's, or
    the writer's cursor inside its transaction)."""

    def __init__(self, s: str, query: Query) -> None:
        self._query = query
        self._leaves = (
            f'SELECT hash FROM "{s}".events WHERE position > %s AND position <= %s '
            "ORDER BY position"
        )
        self._nodes = (
            f'SELECT n.level, n.idx, n.hash FROM "{s}".merkle_nodes n JOIN '
            "unnest(%s::smallint[], %s::bigint[]) AS k(level, idx) "
            "ON n.level = k.level AND n.idx = k.idx"
        )
        self._level = (
            f'SELECT idx, hash FROM "{s}".merkle_nodes WHERE level = %s AND idx > %s '
            "ORDER BY idx LIMIT %s"
        )

    def leaves(self, start: int, end: int) -> list[str]:
        return [str(row[0]) for row in self._query(self._leaves, (start, end))]

    def nodes(self, keys: Sequence[Key]) -> dict[Key, bytes]:
        rows = self._query(self._nodes, ([k[0] for k in keys], [k[1] for k in keys]))
        return {(int(lv), int(i)): bytes(h) for lv, i, h in rows}

    def level(self, level: int, after: int, limit: int) -> list[tuple[int, bytes]]:
        try:
            rows = self._query(self._level, (level, after, limit))
        except StoreError as exc:  # no table: a schema no writer has upgraded yet
            if isinstance(exc.__cause__, pg_errors.UndefinedTable):
                raise NotImplementedError(PREDATES) from None
            raise
        return [(int(i), bytes(h)) for i, h in rows]


def insert_sql(s: str) -> str:
    return (
        f'INSERT INTO "{s}".merkle_nodes (level, idx, hash) '
        "SELECT * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[])"
    )


def _columns(nodes: Sequence[Node]) -> tuple[list[int], list[int], list[bytes]]:
    return [n[0] for n in nodes], [n[1] for n in nodes], [n[2] for n in nodes]


def grow(tx: Tx, s: str, old_size: int, new_leaves: Sequence[str], *, defer: bool) -> None:
    """The nodes an append of `new_leaves` after `old_size` completes, inserted with the
    append (`defer`: sent with its COMMIT). Call under the head lock."""

    def query(sql: str, params: Sequence[Any]) -> list[Any]:
        return tx.cursor.execute(sql, params).fetchall()

    made = completed(old_size, new_leaves, PgNodes(s, query))
    if not made:
        return
    if defer:
        tx.deferred.append((insert_sql(s), _columns(made)))
    else:
        tx.cursor.execute(insert_sql(s), _columns(made))


def upgrade(tx: Tx, s: str) -> None:
    """Give a log written before the tree existed its stored nodes (under the head lock)."""
    cursor = tx.cursor
    cursor.execute(f'DELETE FROM "{s}".merkle_nodes')
    batch: list[Node] = []
    with cursor.connection.cursor(name="rota_merkle_upgrade") as rows:
        rows.itersize = 10_000
        rows.execute(f'SELECT hash FROM "{s}".events ORDER BY position')
        for node in build(str(row[0]) for row in rows):
            batch.append(node)
            if len(batch) >= 5000:
                cursor.execute(insert_sql(s), _columns(batch))
                batch = []
    if batch:
        cursor.execute(insert_sql(s), _columns(batch))
