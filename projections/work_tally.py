"""Optimisation: counts over every Work cost what is active, not what the log holds
(bench http_counts).

Counts over every Work of a scheduler projection, kept current as the projection folds,
so the HTTP overview, `/v1/holds` and `/metrics` cost what is active, not what the log holds.

A store-backed projection holds only its active Works (`OnDemandWorks`); counting its Works
by state, its holds or its attempts' outcomes by reading every Work would bring a million
quiet Works into memory (3.6 GiB and 10 s for one scrape of `/metrics` on a store of 1M
Works). A `WorkTally` counts every Work once instead, then follows each change the
projection folds (`SchedulerProjection.watch`: the Work before and after an event) by
taking the Work's old contribution out and putting its new one in.

A Work's contribution: one in (state, scope); each hold's kind (and its id among the held
Works); each attempt's (binding, outcome) and the recovery segments it began (`recovered`,
`relaunched`). The fold only ever changes a Work's last attempt or appends one (`evolve`),
so a change re-counts the last attempt before it and what follows in the Work after it, not
every attempt (a standing Work may have thousands).

The first count pages through the Works in id order (`counted_upto`: the id of the last one
counted), so a tally of a large store is built a page at a time while the loop goes on: a
change to a Work past that id is not followed (the Work is counted, as it is then, when its
page comes). `complete` once every Work is counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rota.domain.state import AttemptState, WorkState

RECOVERY_KINDS = frozenset({"recovered", "relaunched"})


class WorkTally:
    """See the module docstring. Not thread-safe: used under the service's lock."""

    def __init__(self) -> None:
        self.states: Counter[tuple[str, str]] = Counter()  # (state, scope) -> Works
        self.holds: Counter[str] = Counter()  # hold kind -> holds
        self.held: set[str] = set()  # the Works with at least one hold
        self.attempts: Counter[tuple[str, str | None]] = Counter()  # (binding, outcome)
        self.recoveries: Counter[str] = Counter()  # recovered / relaunched -> segments
        self.counted_upto: str | None = ""  # the last Work id counted; None: every Work
        self.works = 0

    @property
    def complete(self) -> bool:
        return self.counted_upto is None

    def count(self, works: Iterable[WorkState]) -> None:
        """Count Works not counted yet (the first count, a page at a time)."""
        for work in works:
            self._work(work, 1)
            self._attempts(work.binding, work.attempts, 1)

    def changed(self, before: WorkState | None, after: WorkState) -> None:
        """The projection folded an event of `after`'s Work (`before`: the Work before it,
        None for a new Work)."""
        upto = self.counted_upto
        if upto is not None and after.work_id > upto:
            return  # counted when its page comes
        if before is None:
            self.count((after,))
            return
        self._work(before, -1)
        self._work(after, 1)
        old, new = before.attempts, after.attempts
        if before.binding != after.binding:
            self._attempts(before.binding, old, -1)
            self._attempts(after.binding, new, 1)
            return
        # Only the last attempt changes, or one is appended: re-count from the last one.
        keep = max(len(old) - 1, 0)
        if old[keep:] != new[keep:]:
            self._attempts(before.binding, old[keep:], -1)
            self._attempts(after.binding, new[keep:], 1)

    def _work(self, work: WorkState, sign: int) -> None:
        self.works += sign
        key = (work.state, work.scope)
        left = self.states[key] + sign
        if left:
            self.states[key] = left
        else:
            del self.states[key]
        if work.holds:
            for hold in work.holds:
                self._step(self.holds, hold.kind, sign)
            if sign > 0:
                self.held.add(work.work_id)
            else:
                self.held.discard(work.work_id)

    def _attempts(self, binding: str, attempts: Iterable[AttemptState], sign: int) -> None:
        for attempt in attempts:
            self._step(self.attempts, (binding, attempt.outcome), sign)
            for segment in attempt.segments:
                if segment.kind in RECOVERY_KINDS:
                    self._step(self.recoveries, segment.kind, sign)

    @staticmethod
    def _step(counter: Counter, key: object, sign: int) -> None:  # type: ignore[type-arg]
        left = counter[key] + sign
        if left:
            counter[key] = left
        else:
            del counter[key]


__all__ = ["RECOVERY_KINDS", "WorkTally"]
