"""The event store's Merkle methods (`tree_head`, `inclusion_path`, `consistency_path`) for
any store that can read its rows' hashes and stored nodes (`merkle.NodeSource`).

Sizes are judged against the head read first: every stored node of a size up to the head
was committed with the rows it covers, so the answer is exact for that size whatever is
appended meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rota.application.errors import PortCode, StoreError
from rota.application.ports import TreeHead
from rota.infrastructure import merkle

T = TypeVar("T")


def _size_error(message: str) -> StoreError:
    return StoreError(message, code=PortCode.TREE_SIZE)


class TreeReads:
    """The tree of one store: `source` reads it, `head` is the log's head position."""

    def __init__(self, source: merkle.NodeSource, head: Callable[[], int]) -> None:
        self.source = source
        self.head = head

    def _tree(self, size: int) -> merkle.Tree:
        head = self.head()
        if not 0 <= size <= head:
            raise _size_error(f"tree size {size} is outside the log (its head is {head})")
        return merkle.Tree(self.source, size)

    def tree_head(self, size: int | None = None) -> TreeHead:
        size = self.head() if size is None else size
        tree = self._tree(size)
        return TreeHead(size, _missing(tree.root))

    def inclusion_path(self, position: int, size: int) -> list[bytes]:
        if not 1 <= position <= size:
            raise _size_error(f"position {position} is not in a tree of size {size}")
        tree = self._tree(size)
        return _missing(lambda: tree.inclusion_path(position - 1))

    def consistency_path(self, old_size: int, new_size: int) -> list[bytes]:
        if not 0 < old_size <= new_size:
            raise _size_error(
                f"no consistency proof from size {old_size} to {new_size} (0 < old <= new)"
            )
        tree = self._tree(new_size)
        return _missing(lambda: tree.consistency_proof(old_size))


def _missing(read: Callable[[], T]) -> T:
    try:
        return read()
    except merkle.MissingNode as exc:
        raise StoreError(str(exc), code=PortCode.TREE_NODE_MISSING) from None
