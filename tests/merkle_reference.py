"""A naive transcription of RFC 9162 2.1 (MTH, PATH, PROOF) over leaf data, the reference
the Merkle tree's unit and contract tests compare with."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def ref_mth(leaves: Sequence[bytes]) -> bytes:
    n = len(leaves)
    if n == 0:
        return _h(b"")
    if n == 1:
        return _h(b"\x00" + leaves[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return _h(b"\x01" + ref_mth(leaves[:k]) + ref_mth(leaves[k:]))


def ref_path(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*ref_path(m, leaves[:k]), ref_mth(leaves[k:])]
    return [*ref_path(m - k, leaves[k:]), ref_mth(leaves[:k])]


def ref_proof(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    def sub(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
        n = len(d)
        if m == n:
            return [] if b else [ref_mth(d)]
        k = 1
        while k * 2 < n:
            k *= 2
        if m <= k:
            return [*sub(m, d[:k], b), ref_mth(d[k:])]
        return [*sub(m - k, d[k:], False), ref_mth(d[:k])]

    return sub(m, leaves, True)
