"""Optimisation: the log's Merkle tree (RFC 9162) kept as a few stored nodes, so that a
root, an inclusion path or a consistency proof for any size up to the head costs O(log n)
reads and a few hundred hashes, with nothing rebuilt at open (bench proofs).

Measured (bench/RESULTS.md, "Merkle tree"): `python -m bench.proofs` (10M events: 78,117
stored nodes, 2.4 MiB; an inclusion path of <= 24 hashes made in 0.6 ms median, verified
in 0.01 ms) and `python -m bench.append_tree --base <checkout of the base>` (appends with
the tree against the base, interleaved).

Leaves and nodes (RFC 9162 2.1): leaf index i is the event at position i + 1; its leaf
data is the 32 raw bytes of that event's chain hash (the rows' `hash` column, hex-decoded).
Leaf hash = SHA-256(0x00 || data); interior node = SHA-256(0x01 || left || right); the root
of size n is MTH over leaves 0..n-1 (split at the largest power of two below n); the empty
tree's root is SHA-256(b""). `inclusion_path` and `consistency_proof` are RFC 9162's PATH
and PROOF (2.1.3.1, 2.1.4.1); `verify_inclusion` and `verify_consistency` are 2.1.3.2 and
2.1.4.2, so rota checks what it hands out.

What a store keeps: node (L, i) for every level L >= `LEVEL` (8) and index i whose subtree
is complete: the hash of leaves i * 2**L .. (i + 1) * 2**L - 1, i.e. positions
i * 2**L + 1 .. (i + 1) * 2**L. Nothing else; the leaves are the rows. That is n/256 +
n/512 + ... < n/128 hashes: a quarter of a byte per event (about 250 KB per million
events), against 32 bytes an event for storing the leaf hashes again. It is compact
because every subtree the RFC's recursions visit is aligned: either complete (one stored
read when it has >= 256 leaves, else hashed from at most 256 rows) or the right edge of
the tree, which splits into at most log2(n) complete ones. So a root, a path or a proof
reads O(log n) stored nodes and at most a few ranges of <= 256 rows' hashes.

Maintained in the append's own transaction (`completed`): an append that does not finish
a block of 256 leaves writes no node; one that does takes the block's earlier leaf hashes
(<= 255: the SQLite writer keeps them while its cached head is exact, other stores read
them back by primary key) and, per level that completes, the left sibling already stored,
and writes the new nodes: on average two nodes and 511 hashes per 256 events, the floor
being two SHA-256 calls per event (a leaf and its share of the interior). A store written
before the tree existed gets its nodes once, in the schema upgrade its first writer runs
(`Builder` over the whole log: one scan), never at open afterwards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

LEVEL = 8  # the lowest stored level: one node per 256 leaves
BLOCK = 1 << LEVEL
EMPTY_ROOT = hashlib.sha256(b"").digest()

Key = tuple[int, int]  # (level, index)
Node = tuple[int, int, bytes]  # (level, index, hash)


# CPython's built-in SHA-256 (the same digests): about a fifth less overhead a call than
# OpenSSL's on the tree's 33- and 65-byte inputs, two of which every appended event costs.
class _Hash(Protocol):
    def digest(self) -> bytes: ...


_sha256: Callable[[bytes], _Hash]
try:
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:  # before Python 3.12
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        _sha256 = hashlib.sha256


def leaf_hash(data: bytes) -> bytes:
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def mth(hashes: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes already computed (RFC 9162 2.1.1's recursion)."""
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    if n & (n - 1) == 0:  # a complete subtree: level by level, no recursion
        level = list(hashes)
        while len(level) > 1:
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        return level[0]
    k = split(n)
    return node_hash(mth(hashes[:k]), mth(hashes[k:]))


def positions(level: int, index: int) -> tuple[int, int]:
    """The positions (first, last) node (level, index) covers."""
    return (index << level) + 1, (index + 1) << level


class NodeSource(Protocol):
    """Where the tree's inputs are read: the rows' chain hashes and the stored nodes."""

    def leaves(self, start: int, end: int) -> list[str]:
        """The hex chain hashes of leaf indices start .. end - 1 (positions start + 1 .. end)."""
        ...

    def nodes(self, keys: Sequence[Key]) -> dict[Key, bytes]:
        """The stored nodes among `keys` (a missing one is absent from the answer)."""
        ...


class MissingNode(Exception):
    """A stored node the tree needs is not there (a store not upgraded, or damaged)."""

    def __init__(self, level: int, index: int) -> None:
        first, last = positions(level, index)
        super().__init__(
            f"the Merkle node over positions {first}..{last} is not stored: the store "
            "was not upgraded, or its tree table was damaged (run `rota audit verify`)"
        )
        self.level, self.index = level, index


# -- maintaining ---------------------------------------------------------------------------


class Builder:
    """Feeds leaves in log order and yields each stored node as it completes (the upgrade
    of an old store, and `rota audit verify` recomputing the nodes from the rows)."""

    def __init__(self) -> None:
        self.size = 0
        self._hexes: list[str] = []  # hex chain hashes of the block being filled
        self._left: dict[int, bytes] = {}  # level -> a completed left child awaiting its pair

    def add_hex(self, chain_hash: str) -> Sequence[Node]:
        """Feed one leaf's chain hash (hex); the nodes it completes (most leaves: none)."""
        hexes = self._hexes
        hexes.append(chain_hash)
        self.size += 1
        if len(hexes) < BLOCK:
            return ()
        self._hexes = []
        return self._climb(LEVEL, (self.size >> LEVEL) - 1, _block_root(hexes))

    def add(self, chain_hash: bytes) -> Sequence[Node]:
        return self.add_hex(chain_hash.hex())

    def root(self) -> bytes:
        """The root of the tree of the leaves fed so far."""
        partial = [leaf_hash(bytes.fromhex(h)) for h in self._hexes]
        digest = mth(partial) if partial else None
        for level in sorted(self._left):
            left = self._left[level]
            digest = left if digest is None else node_hash(left, digest)
        return EMPTY_ROOT if digest is None else digest

    def _climb(self, level: int, index: int, digest: bytes) -> list[Node]:
        done = [(level, index, digest)]
        while index & 1:
            digest = node_hash(self._left.pop(level), digest)
            level, index = level + 1, index >> 1
            done.append((level, index, digest))
        self._left[level] = digest
        return done


def _block_root(hexes: Sequence[str]) -> bytes:
    """The root of one complete block from its leaves' hex chain hashes (the append's hot
    loop: no call per hash beyond SHA-256's own)."""
    sha, fromhex = _sha256, bytes.fromhex
    level = [sha(fromhex("00" + h)).digest() for h in hexes]
    while len(level) > 1:
        pairs = iter(level)
        level = [sha(b"\x01" + a + b).digest() for a, b in zip(pairs, pairs, strict=True)]
    return level[0]


def completed(old_size: int, new_leaves: Sequence[str], source: NodeSource) -> list[Node]:
    """The stored nodes an append of `new_leaves` (hex chain hashes, leaf indices old_size
    ..) completes, given the tree stored up to `old_size` (read through `source`, inside the
    append's transaction). Empty, reading nothing, unless a block of 256 leaves completes."""
    new_size = old_size + len(new_leaves)
    if old_size >> LEVEL == new_size >> LEVEL:
        return []
    start = old_size & ~(BLOCK - 1)
    hexes = source.leaves(start, old_size) if start < old_size else []
    full = (new_size >> LEVEL << LEVEL) - start  # leaves in the blocks that complete
    hexes = [*hexes, *new_leaves[: full - len(hexes)]]
    if len(hexes) != full:
        raise MissingNode(LEVEL, start >> LEVEL)
    made: dict[Key, bytes] = {}
    for block in range(old_size >> LEVEL, new_size >> LEVEL):
        offset = (block << LEVEL) - start
        made[(LEVEL, block)] = _block_root(hexes[offset : offset + BLOCK])
    needed: list[Key] = []
    level = LEVEL + 1
    while new_size >> level > old_size >> level:
        if old_size >> (level - 1) & 1:  # the first left child completed before this append
            needed.append((level - 1, (old_size >> (level - 1)) - 1))
        level += 1
    stored = source.nodes(needed) if needed else {}
    for key in needed:
        if key not in stored:
            raise MissingNode(*key)
    made.update(stored)
    top = level
    for level in range(LEVEL + 1, top):
        for index in range(old_size >> level, new_size >> level):
            made[(level, index)] = node_hash(
                made[(level - 1, 2 * index)], made[(level - 1, 2 * index + 1)]
            )
    return [(lv, i, h) for (lv, i), h in made.items() if (lv, i) not in stored]


def build(chain_hashes: Iterable[str]) -> Iterable[Node]:
    """Every stored node of a log, from its chain hashes in order (an upgrade's one scan)."""
    builder = Builder()
    for h in chain_hashes:
        yield from builder.add_hex(h)


# -- reading -------------------------------------------------------------------------------


class Tree:
    """The tree of a log of `size` leaves (at most its head), read through `source`."""

    def __init__(self, source: NodeSource, size: int) -> None:
        self.source = source
        self.size = size
        self._blocks: dict[int, list[bytes]] = {}
        self._memo: dict[tuple[int, int], bytes] = {}

    def _leaf_hashes(self, start: int, end: int) -> list[bytes]:
        """Leaf hashes of start .. end - 1, all in one block (read a block at a time)."""
        block = start >> LEVEL
        hashes = self._blocks.get(block)
        if hashes is None:
            first = block << LEVEL
            hexes = self.source.leaves(first, min(first + BLOCK, self.size))
            hashes = self._blocks[block] = [leaf_hash(bytes.fromhex(h)) for h in hexes]
        offset = block << LEVEL
        found = hashes[start - offset : end - offset]
        if len(found) != end - start:
            raise MissingNode(0, start)
        return found

    def subtree(self, start: int, end: int) -> bytes:
        """MTH of leaves start .. end - 1 (an aligned range, as the RFC's recursions make)."""
        n = end - start
        if n == 0:
            return EMPTY_ROOT
        memo = self._memo.get((start, end))
        if memo is not None:
            return memo
        if n & (n - 1) == 0 and n >= BLOCK and start % n == 0:
            level = n.bit_length() - 1
            found = self.source.nodes([(level, start >> level)]).get((level, start >> level))
            if found is None:
                raise MissingNode(level, start >> level)
            digest = found
        elif n <= BLOCK and start >> LEVEL == (end - 1) >> LEVEL:
            digest = mth(self._leaf_hashes(start, end))
        else:
            k = split(n)
            digest = node_hash(self.subtree(start, start + k), self.subtree(start + k, end))
        self._memo[(start, end)] = digest
        return digest

    def root(self) -> bytes:
        return self.subtree(0, self.size)

    def inclusion_path(self, index: int) -> list[bytes]:
        """RFC 9162 PATH(index, D[size]): the siblings from the leaf up."""
        if not 0 <= index < self.size:
            raise ValueError(f"leaf {index} is not in a tree of {self.size}")
        path: list[bytes] = []
        start, end = 0, self.size
        while end - start > 1:
            k = split(end - start)
            if index < start + k:
                path.append(self.subtree(start + k, end))
                end = start + k
            else:
                path.append(self.subtree(start, start + k))
                start += k
        path.reverse()
        return path

    def consistency_proof(self, old_size: int) -> list[bytes]:
        """RFC 9162 PROOF(old_size, D[size]) (empty when old_size is 0 or the size)."""
        if not 0 <= old_size <= self.size:
            raise ValueError(f"size {old_size} is not within a tree of {self.size}")
        if old_size in (0, self.size):
            return []
        proof: list[bytes] = []
        start, end, m, complete = 0, self.size, old_size, True
        while m != end - start:
            n = end - start
            k = split(n)
            if m <= k:
                proof.append(self.subtree(start + k, end))
                end = start + k
            else:
                proof.append(self.subtree(start, start + k))
                start, m, complete = start + k, m - k, False
        if not complete:
            proof.append(self.subtree(start, end))
        proof.reverse()
        return proof


# -- verifying (RFC 9162 2.1.3.2 and 2.1.4.2) ----------------------------------------------


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes | None:
    """The root an inclusion path leads to from leaf hash `leaf`, or None if it cannot be
    a path of leaf `index` in a tree of `size` (wrong length, index out of range)."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r if sn == 0 else None


def verify_inclusion(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes
) -> bool:
    return root_from_inclusion(index, size, leaf, path) == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 2.1.4.2; sizes must satisfy 0 < old_size <= new_size."""
    if not 0 < old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root
