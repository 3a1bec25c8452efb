"""Every store keeps the log's Merkle tree (RFC 9162) in the appends' own transactions.

Roots, inclusion paths and consistency proofs at many sizes equal a naive reference MTH over
the rows' chain hashes: after single and batch appends, across imports (`append_raw`) and
reopening, and for a store written before the tree existed (upgraded once, by its first
writer). Sizes outside the log are refused with `tree_size`.
"""

from __future__ import annotations

import random

import pytest
from merkle_reference import ref_mth, ref_path, ref_proof

from rota.application.errors import PortCode, StoreError
from rota.application.ports import EventStore, RawRecord
from rota.infrastructure import merkle
from rota.infrastructure.stores import open_store as open_url

from .conftest import OpenStore
from .helpers import accepted, submitted

SIZES = [1, 2, 3, 255, 256, 257, 300, 511, 512, 513, 700, 1023, 1024, 1025]


def _grow(store: EventStore, total: int, seed: int) -> None:
    """Append single events and batches of every kind of size up to `total` events."""
    rng = random.Random(seed)
    count = store.head().position
    while count < total:
        batch = min(rng.choice([1, 1, 2, 40, 255, 256, 333]), total - count)
        work = f"w{count}"
        store.append([submitted(work), *[accepted(work, i) for i in range(batch - 1)]])
        count += batch


def _leaves(store: EventStore) -> list[bytes]:
    rows: list[RawRecord] = []
    while batch := store.read_raw(len(rows), 5000):
        rows.extend(batch)
    return [bytes.fromhex(r.hash) for r in rows]


def _check(store: EventStore, sizes: list[int], samples: int = 5) -> None:
    leaves = _leaves(store)
    head = len(leaves)
    assert store.tree_head() == store.tree_head(head)
    assert store.tree_head(0).root == merkle.EMPTY_ROOT
    for size in [s for s in sizes if s <= head] + [head]:
        root = store.tree_head(size).root
        assert root == ref_mth(leaves[:size]), size
        for position in {
            1,
            size,
            *random.Random(size).sample(range(1, size + 1), min(samples, size)),
        }:
            path = store.inclusion_path(position, size)
            assert path == ref_path(position - 1, leaves[:size])
            leaf = merkle.leaf_hash(leaves[position - 1])
            assert merkle.verify_inclusion(position - 1, size, leaf, path, root)
        for old in {1, size // 2 or 1, max(size - 1, 1), size}:
            proof = store.consistency_path(old, size)
            assert proof == ref_proof(old, leaves[:size])
            assert merkle.verify_consistency(old, size, ref_mth(leaves[:old]), root, proof)


def test_roots_and_proofs_equal_the_reference_at_every_size(store: EventStore) -> None:
    _grow(store, 1100, seed=1)
    _check(store, SIZES)


def test_stored_nodes_are_the_complete_subtrees(store: EventStore) -> None:
    _grow(store, 1030, seed=2)
    leaves = _leaves(store)
    expected = {(lv, i): h for lv, i, h in merkle.build(h.hex() for h in leaves)}
    found = {}
    for level in range(merkle.LEVEL, 12):
        for index, digest in store.tree_nodes(level):
            found[(level, index)] = digest
    assert found == expected
    assert store.tree_nodes(8, after=1, limit=1) == [(2, expected[(8, 2)])]


def test_the_tree_is_kept_across_reopen(open_store: OpenStore) -> None:
    first = open_store()
    _grow(first, 600, seed=3)
    second = open_store()
    _grow(second, 1040, seed=4)
    _grow(first, 1500, seed=11)  # the first handle's writer caches are stale: not trusted
    _grow(second, 1800, seed=12)
    _check(first, [*SIZES, 1500, 1536, 1792, 1800], samples=2)
    _check(open_store(), SIZES, samples=2)
    expected = {(lv, i): h for lv, i, h in merkle.build(h.hex() for h in _leaves(first))}
    found = {(lv, i): h for lv in range(merkle.LEVEL, 12) for i, h in first.tree_nodes(lv)}
    assert found == expected


def test_imports_keep_the_tree(store: EventStore) -> None:
    source = open_url(f"memory://merkle-import-{id(store)}")
    try:
        _grow(source, 1300, seed=5)
        rows: list[RawRecord] = []
        while batch := source.read_raw(len(rows), 5000):
            rows.extend(batch)
        rng = random.Random(6)
        done = 0
        while done < 900:
            take = rng.choice([1, 7, 255, 256, 300])
            store.append_raw(rows[done : done + take][: 900 - done])
            done = min(done + take, 900)
        assert store.tree_head() == source.tree_head(900)
        store.append_raw(rows[900:])
        assert store.tree_head() == source.tree_head()
        _grow(store, 1400, seed=7)
        _check(store, [*SIZES, 1300], samples=2)
    finally:
        source.close()


def test_sizes_outside_the_log_are_refused(store: EventStore) -> None:
    _grow(store, 10, seed=8)
    cases = [
        lambda: store.tree_head(11),
        lambda: store.tree_head(-1),
        lambda: store.inclusion_path(0, 5),
        lambda: store.inclusion_path(6, 5),
        lambda: store.inclusion_path(5, 11),
        lambda: store.consistency_path(0, 5),
        lambda: store.consistency_path(6, 5),
        lambda: store.consistency_path(5, 11),
    ]
    for case in cases:
        with pytest.raises(StoreError) as raised:
            case()
        assert raised.value.code == PortCode.TREE_SIZE
    assert store.consistency_path(5, 5) == []


def _downgrade(store_kind: str, store_url: str) -> None:
    """Make the store look written by a rota before the tree: no node table, version 1."""
    if store_kind == "sqlite":
        import apsw

        conn = apsw.Connection(store_url.removeprefix("sqlite:///"))
        conn.execute("DROP TABLE merkle_nodes")
        conn.execute("UPDATE rota_meta SET value = '1' WHERE key = 'schema_version'")
        conn.close()
        return
    from postgres import admin_execute

    from rota.infrastructure.postgres.names import split_schema

    _, schema = split_schema(store_url)
    admin_execute(f'DROP TABLE "{schema}".merkle_nodes')
    admin_execute(f"UPDATE \"{schema}\".rota_meta SET value = '1' WHERE key = 'schema_version'")


def _tamper_one_node(store_kind: str, store_url: str) -> None:
    if store_kind == "sqlite":
        import apsw

        conn = apsw.Connection(store_url.removeprefix("sqlite:///"))
        conn.execute("UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 8 AND idx = 0")
        conn.close()
        return
    from postgres import admin_execute

    from rota.infrastructure.postgres.names import split_schema

    _, schema = split_schema(store_url)
    admin_execute(
        f'UPDATE "{schema}".merkle_nodes SET hash = %s WHERE level = 8 AND idx = 0', (bytes(32),)
    )


def test_a_store_from_before_the_tree_is_upgraded_once(
    store_kind: str, store_url: str, open_store: OpenStore
) -> None:
    if store_kind == "memory":
        pytest.skip("memory: no store outlives its process, so none predates the tree")
    old = open_store()
    _grow(old, 1100, seed=9)
    expected = old.tree_head()
    old.close()
    _downgrade(store_kind, store_url)
    upgraded = open_store()  # a writer's open upgrades it (one scan of the rows)
    assert upgraded.tree_head() == expected
    _check(upgraded, SIZES, samples=2)
    _grow(upgraded, 1300, seed=10)
    _check(upgraded, [1100, 1280, 1300], samples=2)
    upgraded.close()
    _tamper_one_node(store_kind, store_url)  # later opens do not rebuild the nodes
    again = open_store()
    assert again.tree_nodes(8, limit=1) == [(0, bytes(32))]
    assert again.tree_head(256).root == bytes(32)
