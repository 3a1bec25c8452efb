"""The SQLite log's Merkle tree: the `merkle_nodes` table, kept in the appends' transaction.

`merkle_nodes(level, idx, hash)` holds the stored nodes `rota.infrastructure.merkle`
describes (every complete subtree of >= 256 leaves); the leaves are the `events` rows'
`hash` column. An append calls `grow` inside its write transaction; a store created by a
rota before the tree existed (schema version 1) gets its nodes in the schema upgrade its
first writer runs (`upgrade`: one scan of the hash column), never at open afterwards. A
reader of a file that was never upgraded (a read-only open of an old store) finds no table
and is told so (`tree_node_missing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apsw

from rota.infrastructure.merkle import BLOCK, Key, build, completed

NODES_SCHEMA = """
CREATE TABLE IF NOT EXISTS merkle_nodes (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB    NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
"""
INSERT_NODE = "INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)"
LEAVES = "SELECT hash FROM events WHERE position > ? AND position <= ? ORDER BY position"
NODE = "SELECT hash FROM merkle_nodes WHERE level = ? AND idx = ?"
LEVEL_NODES = "SELECT idx, hash FROM merkle_nodes WHERE level = ? AND idx > ? ORDER BY idx LIMIT ?"

PREDATES = "this store predates the Merkle tree: a writer's first open upgrades it"
Query = Callable[[str, tuple[Any, ...]], list[Any]]


class SqliteNodes:
    """The tree's `merkle.NodeSource` over a query function (a reader's, or the writer's
    cursor inside its transaction)."""

    def __init__(self, query: Query) -> None:
        self._query = query

    def leaves(self, start: int, end: int) -> list[str]:
        return [str(row[0]) for row in self._query(LEAVES, (start, end))]

    def nodes(self, keys: Sequence[Key]) -> dict[Key, bytes]:
        found: dict[Key, bytes] = {}
        for key in keys:
            try:
                rows = self._query(NODE, key)
            except apsw.SQLError:  # no table: a file never opened by a writer since
                return found
            if rows:
                found[key] = bytes(rows[0][0])
        return found

    def level(self, level: int, after: int, limit: int) -> list[tuple[int, bytes]]:
        try:
            rows = self._query(LEVEL_NODES, (level, after, limit))
        except apsw.SQLError:  # no table: a file never opened by a writer since
            raise NotImplementedError(PREDATES) from None
        return [(int(i), bytes(h)) for i, h in rows]


def _on(cursor: apsw.Cursor) -> Query:
    return lambda sql, params: cursor.execute(sql, params).fetchall()


class _Known(SqliteNodes):
    """The writer's source: the open block's leaves from its cache when it knows them."""

    def __init__(self, query: Query, known: list[str] | None) -> None:
        super().__init__(query)
        self._known = known

    def leaves(self, start: int, end: int) -> list[str]:
        known = self._known
        if known is not None and len(known) == end - start and not start & (BLOCK - 1):
            return known
        return super().leaves(start, end)


def grow(
    cursor: apsw.Cursor,
    old_size: int,
    new_leaves: Sequence[str],
    known: list[str] | None = None,
) -> None:
    """Store the nodes an append of `new_leaves` after `old_size` completes (inside its
    write transaction; reads nothing unless a block of 256 leaves completes). `known`: the
    hex hashes of the open block's leaves (from the last multiple of 256 to `old_size`),
    when the writer knows them exactly, saving their read."""
    made = completed(old_size, new_leaves, _Known(_on(cursor), known))
    if made:
        cursor.executemany(INSERT_NODE, made)


def upgrade(cursor: apsw.Cursor) -> None:
    """Give a log written before the tree existed its stored nodes (one scan)."""
    cursor.execute(NODES_SCHEMA)
    cursor.execute("DELETE FROM merkle_nodes")
    hashes = (
        str(row[0])
        for row in cursor.connection.execute("SELECT hash FROM events ORDER BY position")
    )
    batch: list[tuple[int, int, bytes]] = []
    for node in build(hashes):
        batch.append(node)
        if len(batch) >= 1000:
            cursor.executemany(INSERT_NODE, batch)
            batch = []
    if batch:
        cursor.executemany(INSERT_NODE, batch)
