"""The Merkle tree module against a naive transcription of RFC 9162 2.1 (MTH, PATH, PROOF).

The stored form is built both incrementally (`completed`, append by append in batches of
every size) and in one scan (`build`), and every root, path and proof read through it must
equal the naive reference's; the verifiers accept exactly those and refuse altered ones.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from merkle_reference import ref_mth, ref_path, ref_proof

from rota.infrastructure import merkle


class DictSource:
    """Leaves as a list of hex chain hashes; nodes in a dict, counting the reads."""

    def __init__(self, chain: list[bytes]) -> None:
        self.chain = chain
        self.stored: dict[merkle.Key, bytes] = {}
        self.node_reads = 0
        self.leaf_reads = 0

    def leaves(self, start: int, end: int) -> list[str]:
        self.leaf_reads += end - start
        return [h.hex() for h in self.chain[start:end]]

    def nodes(self, keys: Sequence[merkle.Key]) -> dict[merkle.Key, bytes]:
        self.node_reads += len(keys)
        return {k: self.stored[k] for k in keys if k in self.stored}


def _chain(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


def _grown(chain: list[bytes], seed: int) -> DictSource:
    """The stored form as appends in batches of random sizes leave it."""
    source = DictSource([])
    rng = random.Random(seed)
    size = 0
    while size < len(chain):
        batch = chain[size : size + rng.choice([1, 1, 3, 17, 255, 256, 300, 700])]
        made = merkle.completed(size, [h.hex() for h in batch], source)
        source.chain.extend(batch)
        for level, index, digest in made:
            assert (level, index) not in source.stored
            source.stored[(level, index)] = digest
        size += len(batch)
    return source


def test_incremental_equals_one_scan_and_every_complete_node_is_stored() -> None:
    chain = _chain(5000)
    grown = _grown(chain, seed=3)
    scanned = {(lv, i): h for lv, i, h in merkle.build(h.hex() for h in chain)}
    assert grown.stored == scanned
    for (level, index), digest in scanned.items():
        assert digest == ref_mth(chain[index << level : (index + 1) << level])
    assert len(scanned) == sum(5000 >> lv for lv in range(merkle.LEVEL, 13))


@pytest.mark.parametrize("size", [0, 1, 2, 3, 7, 8, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025])
def test_root_and_every_path_match_the_reference(size: int) -> None:
    chain = _chain(size, seed=size)
    tree = merkle.Tree(_grown(chain, seed=size), size)
    root = tree.root()
    assert root == ref_mth(chain)
    for index in range(size) if size < 600 else range(0, size, 7):
        path = tree.inclusion_path(index)
        assert path == ref_path(index, chain)
        leaf = merkle.leaf_hash(chain[index])
        assert merkle.verify_inclusion(index, size, leaf, path, root)


def test_roots_and_proofs_of_every_old_size_match_the_reference() -> None:
    chain = _chain(1300, seed=9)
    source = _grown(chain, seed=9)
    for new in (1, 2, 5, 256, 257, 600, 1024, 1300):
        new_root = merkle.Tree(source, new).root()
        assert new_root == ref_mth(chain[:new])
        for old in range(1, new + 1, 1 if new < 300 else 13):
            proof = merkle.Tree(source, new).consistency_proof(old)
            assert proof == ref_proof(old, chain[:new])
            old_root = ref_mth(chain[:old])
            assert merkle.verify_consistency(old, new, old_root, new_root, proof)


def test_a_big_tree_reads_few_nodes_and_leaves() -> None:
    size = 70_000
    chain = _chain(size, seed=4)
    source = DictSource(chain)
    source.stored = {(lv, i): h for lv, i, h in merkle.build(h.hex() for h in chain)}
    tree = merkle.Tree(source, size)
    assert tree.root() == ref_mth(chain)
    source.node_reads = source.leaf_reads = 0
    tree = merkle.Tree(source, size)
    path = tree.inclusion_path(12_345)
    assert merkle.verify_inclusion(12_345, size, merkle.leaf_hash(chain[12_345]), path, tree.root())
    assert source.node_reads <= 2 * size.bit_length()
    assert source.leaf_reads <= 3 * merkle.BLOCK


def test_the_verifiers_refuse_what_is_not_a_proof() -> None:
    chain = _chain(700, seed=5)
    source = _grown(chain, seed=5)
    tree = merkle.Tree(source, 700)
    root, path = tree.root(), tree.inclusion_path(300)
    leaf = merkle.leaf_hash(chain[300])
    assert not merkle.verify_inclusion(301, 700, leaf, path, root)  # another index
    assert not merkle.verify_inclusion(300, 512, leaf, path, root)  # another size
    assert not merkle.verify_inclusion(300, 2000, leaf, path, root)
    assert not merkle.verify_inclusion(300, 700, leaf, path[:-1], root)  # truncated
    assert not merkle.verify_inclusion(300, 700, leaf, [*path, path[0]], root)  # extended
    assert not merkle.verify_inclusion(300, 700, merkle.leaf_hash(chain[301]), path, root)
    assert not merkle.verify_inclusion(700, 700, leaf, path, root)  # out of range
    old_root = merkle.Tree(source, 300).root()
    proof = tree.consistency_proof(300)
    assert merkle.verify_consistency(300, 700, old_root, root, proof)
    assert not merkle.verify_consistency(300, 700, old_root, root, proof[:-1])
    assert not merkle.verify_consistency(301, 700, old_root, root, proof)
    assert not merkle.verify_consistency(300, 700, root, old_root, proof)
    assert not merkle.verify_consistency(0, 700, merkle.EMPTY_ROOT, root, [])
    assert not merkle.verify_consistency(700, 300, root, old_root, proof)
    assert merkle.verify_consistency(700, 700, root, root, [])
    assert not merkle.verify_consistency(700, 700, root, root, [root])


def test_a_missing_stored_node_is_named_with_its_positions() -> None:
    chain = _chain(600, seed=6)
    source = _grown(chain, seed=6)
    del source.stored[(8, 1)]
    with pytest.raises(merkle.MissingNode, match=r"positions 257\.\.512"):
        merkle.Tree(source, 600).inclusion_path(0)
    del source.stored[(9, 0)]
    with pytest.raises(merkle.MissingNode, match=r"positions 1\.\.512"):
        merkle.completed(600, [h.hex() for h in _chain(424, seed=7)], source)


def test_the_builder_knows_the_root_of_every_size() -> None:
    chain = _chain(1100, seed=8)
    builder = merkle.Builder()
    assert builder.root() == ref_mth([])
    for size, data in enumerate(chain, 1):
        builder.add(data)
        if size < 20 or size % 97 == 0 or size in (256, 512, 768, 1024, 1025):
            assert builder.root() == ref_mth(chain[:size]), size
