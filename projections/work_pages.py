"""Pages of Works in id order: the filter a listing applies and the keyset page of Works
held in memory.

A page is at most `limit` Works whose id sorts after the cursor `after` (keyset paging:
the last id of the previous page), in id order, matching a `WorkFilter`. It is read with
`limit + 1` to know whether there is more (as seed 002 pages): `next_cursor` is the last
id of a page only when another matching Work follows it. Works added while a listing
pages are seen when their id sorts after the cursor, and a page never repeats or skips a
Work that existed when the listing began and still exists.

The Works of a projection held whole in memory page here (`page_in_memory`); a store-backed
projection (`OnDemandWorks`) pages through its store instead, so a listing never holds
every Work.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from itertools import islice

import msgspec

from rota.domain.state import WorkState
from rota.projections.work_rows import RowKeys

TERMINAL = frozenset({"completed", "failed", "cancelled"})  # `WorkState.terminal`'s values
DEFAULT_LIMIT = 16  # seed 002: production pages hold 16
MAX_LIMIT = 1000  # a listing page's hard cap (the cadence's own scans stop at 64)


class WorkFilter(msgspec.Struct, frozen=True):
    """Which Works a listing shows: every one by default.

    `state`: a Work state name (`ready`, `running`, `completed` ...); `scope`: a scope and
    every scope under it (`team` matches `team` and `team/a`, not `teams`); `binding`: the
    binding's name.
    """

    state: str | None = None
    scope: str | None = None
    binding: str | None = None

    def matches(self, work: WorkState) -> bool:
        return self._admits(work.scope, work.binding) and (
            self.state is None or work.state == self.state
        )

    def _admits(self, scope: str, binding: str) -> bool:
        """Whether a Work in `scope` on `binding` passes the scope and binding filters."""
        if self.binding is not None and binding != self.binding:
            return False
        if self.scope is not None:
            wanted = self.scope.rstrip("/")
            if scope != wanted and not scope.startswith(wanted + "/"):
                return False
        return True

    def rules_out(self, keys: RowKeys) -> bool:
        """Whether no Work with these row fields can match: a necessary test a listing makes
        on a stored row before decoding it (`WorkState.state` gives a terminal Work's
        terminal as its state first, so a terminal Work is in no other state, and only
        `failed` is both a terminal and a state a live Work can be in)."""
        if not self._admits(keys.scope, keys.binding):
            return True
        state = self.state
        if state is None or state == "failed":
            return state == "failed" and keys.terminal not in (None, "failed")
        if state in TERMINAL:
            return keys.terminal != state
        return keys.terminal is not None

    @property
    def everything(self) -> bool:
        return self.state is None and self.scope is None and self.binding is None


EVERY = WorkFilter()  # no filter: every Work


def bounded(limit: int | None) -> int:
    """`limit` within 1..MAX_LIMIT (None: the default); a larger one is cut to the cap."""
    if limit is None:
        return DEFAULT_LIMIT
    if limit < 1:
        raise ValueError(f"a page holds at least 1 Work, not {limit}")
    return min(limit, MAX_LIMIT)


def page_of(works: Iterable[WorkState], limit: int) -> tuple[list[WorkState], str | None]:
    """The first `limit` of `works` (in id order, already filtered) and the next cursor:
    the last id of the page when another Work follows, else None."""
    found = list(islice(works, limit + 1))
    if len(found) > limit:
        return found[:limit], found[limit - 1].work_id
    return found, None


def page_in_memory(
    works: Mapping[str, WorkState], after: str, limit: int, where: WorkFilter
) -> tuple[list[WorkState], str | None]:
    """A page of Works all held in `works` (see the module docstring)."""
    # One pass (no sort of every id): the limit + 1 smallest matching ids after the cursor.
    ids = heapq.nsmallest(
        limit + 1, (i for i, w in works.items() if i > after and where.matches(w))
    )
    return page_of((works[work_id] for work_id in ids), limit)


__all__ = [
    "DEFAULT_LIMIT",
    "EVERY",
    "MAX_LIMIT",
    "TERMINAL",
    "WorkFilter",
    "bounded",
    "page_in_memory",
    "page_of",
]
