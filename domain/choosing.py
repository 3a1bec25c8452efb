"""The order a start pass considers ready Work in: priority, then fair share, then
readiness; and of every `share` starts, one for the oldest ready Work. Pure.

Ready Work comes in groups, `(-priority, flow)`, each oldest first (lazily: a group may
hold far more Work than a pass looks at). Priority levels are strict. Within a level the
flows are served by start-time fair queuing (`rota.domain.flow`): the flow whose next
start has the smallest tag goes first, ties to the older head. Only flows that can start
take part: a group whose flow key is full, paused or out of tokens is dropped for the pass
(`drop`), so it neither holds others back nor holds the virtual time down.

The fairness bound: a flow that becomes ready is tagged with the virtual time, so at its
priority level it starts after at most one start of each other flow whose tag is not
behind (the flows ready then), plus the starts the starvation bound takes (one in every
`share`), however large their backlogs: a noisy tenant with 100x the backlog delays a
small tenant's next start by at most one start per other active flow (weights count:
a flow of weight w may take w starts in that time).

The starvation bound, across priority levels: when `since_oldest` (starts since the bound
last chose) reaches `share - 1` and some ready Work waits at a lower priority than the fair
choice, the oldest of those is considered next, and the start it admits is marked
`oldest` (its claim records that pass). So of every `share` starts at least one goes to
the oldest ready Work of a lower level (while one can start); within a level, fair share
bounds the wait (above), so the bound does not reorder a level's flows.

A pass looks at no more than `limit` Work of one group and `4 * limit` in all (`budget`);
Work skipped at once because a pool or key it needs was already found full this pass is
counted apart, up to `16 * limit`, so a long blocked queue costs a bounded pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from rota.domain.flow import Fairness, FlowRules, serve, tag
from rota.domain.state import WorkState

Group = tuple[int, str]


class Chooser:
    """Hands out ready Works one at a time (`next`), told what became of each (`started`,
    `drop`). See the module docstring."""

    def __init__(
        self,
        groups: Mapping[Group, Iterator[WorkState]],
        *,
        fair: Fairness,
        rules: FlowRules,
        limit: int,
    ) -> None:
        self.iters = dict(groups)
        self.single = len(self.iters) <= 1
        self.rules = rules
        self.fair = Fairness(fair.vtime, dict(fair.finish), fair.since_oldest)  # this pass's
        self.share = rules.share
        self.budget = limit if self.single else 4 * limit
        self.skips = 16 * limit
        self.per_group = limit
        self.heads: dict[Group, WorkState] = {}
        self.looked: dict[Group, int] = {}
        self._heap: list[tuple[int, float, int, Group]] = []
        self._oldest: dict[int, list[tuple[int, Group]]] = {}  # by level: (position, group)
        # One group is handed out as it comes (`lone`; `plan_starts` walks it inline).
        self.lone = next(iter(self.iters.values()), iter(())) if self.single else None
        if not self.single:
            for group in self.iters:
                self._advance(group)

    def _advance(self, group: Group) -> None:
        work = next(self.iters[group], None)
        if work is None:
            self.heads.pop(group, None)
            return
        self.heads[group] = work
        position = work.pending[0].position
        if not self.single:
            heapq.heappush(self._heap, (group[0], tag(self.fair, group[1]), position, group))
            heapq.heappush(self._oldest.setdefault(group[0], []), (position, group))

    def next(self) -> tuple[WorkState, bool] | None:
        """The next Work to consider, and whether the starvation bound chose it."""
        if self.budget <= 0:
            return None
        if self.lone is not None:
            work = next(self.lone, None)
            self.budget -= 1
            return None if work is None else (work, False)
        chosen, oldest = self._peek_fair(), False
        if self.share and self.fair.since_oldest >= self.share - 1 and chosen is not None:
            waiting = self._peek_oldest(below=chosen[0])
            if waiting is not None:  # the oldest Work of a lower priority: its turn
                chosen, oldest = waiting, True
        if chosen is None:
            return None
        group, work = chosen, self.heads[chosen]
        self.budget -= 1
        self.looked[group] = self.looked.get(group, 0) + 1
        if self.looked[group] >= self.per_group:
            self.heads.pop(group, None)
        else:
            self._advance(group)
        return work, oldest

    def skipped(self) -> bool:
        """Count a Work skipped at once (a full pool or key); False once none may be."""
        self.budget += 1
        self.skips -= 1
        return self.skips > 0

    # Both heaps are read, never popped, by the choice: a chosen group's head moves on (or
    # the group leaves), which leaves its entries stale, dropped when next met.

    def _peek_fair(self) -> Group | None:
        heap = self._heap
        while heap:
            level, stamp, position, group = heap[0]
            head = self.heads.get(group)
            if head is None or head.pending[0].position != position:
                heapq.heappop(heap)  # stale: the group moved on, or was dropped
                continue
            now = tag(self.fair, group[1])
            if now != stamp:  # the flow was served (or V moved) since: re-tag it
                heapq.heapreplace(heap, (level, now, position, group))
                continue
            return group
        return None

    def _peek_oldest(self, below: int) -> Group | None:
        """The group of the oldest ready Work at a lower priority than level `below`."""
        found: tuple[int, Group] | None = None
        for level, heap in self._oldest.items():
            if level <= below:
                continue
            while heap:
                position, group = heap[0]
                head = self.heads.get(group)
                if head is not None and head.pending[0].position == position:
                    if found is None or position < found[0]:
                        found = (position, group)
                    break
                heapq.heappop(heap)
        return None if found is None else found[1]

    def started(self, work: WorkState, oldest: bool, flow: str) -> None:
        """A Work this pass admits: fold its start into this pass's fair share."""
        if self.single:
            return
        serve(self.fair, flow, self.rules.weight(flow), oldest)

    def drop(self, work: WorkState, flow: str) -> None:
        """The Work's whole group cannot start this pass (its flow key is full, paused or
        out of tokens): no more of it is considered."""
        self.heads.pop((-work.priority, flow), None)
