"""Audit of the stored Merkle nodes: recompute them from the rows as the chain walk passes
and compare each with the store's (`rota.infrastructure.merkle` says what is stored).

A stored node that differs from the one the rows give, one that is missing, or one beyond
the log's head is reported with the positions it covers: proofs built on it would be
wrong (the rows themselves are judged by the chain, not here). Only the first problem is
kept. A store that keeps no tree is not judged (`ok` stays None).
"""

from __future__ import annotations

from rota.application.ports import EventStore
from rota.infrastructure.merkle import LEVEL, Builder, positions

PAGE = 1000
TOP = 63  # no log has a node above this level


class TreeCheck:
    """Feed it each row's hash in position order (`add`), then `finish` with the head."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.builder = Builder()
        self.ok: bool | None = True
        self.reason: str | None = None
        self.first: int | None = None
        self.last: int | None = None
        self._pages: dict[int, list[tuple[int, bytes]]] = {}
        self._after: dict[int, int] = {}
        try:
            store.tree_nodes(LEVEL, limit=1)
        except NotImplementedError:
            self.ok = None

    def _next(self, level: int) -> tuple[int, bytes] | None:
        page = self._pages.get(level)
        if not page:
            page = self._pages[level] = self.store.tree_nodes(
                level, self._after.get(level, -1), PAGE
            )[::-1]
        if not page:
            return None
        index, digest = page.pop()
        self._after[level] = index
        return index, digest

    def _fail(self, level: int, index: int, why: str) -> None:
        self.first, self.last = positions(level, index)
        self.ok = False
        self.reason = f"the stored Merkle node over positions {self.first}..{self.last} {why}"

    def add(self, chain_hash: str) -> None:
        done = self.builder.add_hex(chain_hash)
        if not done or not self.ok:
            return
        for level, index, digest in done:
            found = self._next(level)
            if found is None or found[0] > index:
                self._fail(level, index, "is missing (the store's tree was damaged)")
                return
            if found[0] < index:
                self._fail(level, found[0], "is not one the rows make (an extra node)")
                return
            if found[1] != digest:
                self._fail(level, index, "does not match the rows (it was altered)")
                return

    def finish(self) -> None:
        """After the whole log: no stored node may lie beyond what the rows complete."""
        if not self.ok:
            return
        for level in range(LEVEL, TOP):
            found = self._next(level)
            if found is not None:
                self._fail(level, found[0], "lies beyond the log's head (an extra node)")
                return
