"""The Works a scheduler projection holds in memory (`OnDemandWorks`: the rest are found
when asked for), and which of them are quiet (`is_quiet`: named by no index)."""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any

from rota.domain.state import WorkState
from rota.projections.work_pages import WorkFilter, page_in_memory


class OnDemandWorks(dict[str, WorkState]):
    """Works of a projection of which only some are held; the rest are found when asked for.

    The fold uses it as the dict it is (`works.get` of a held Work stays a dict lookup).
    An adapter subclasses it to find a missing Work (`rota.infrastructure.stored_works`
    reads it from the projection store or folds it from its stream), so the fold itself
    does no I/O. The indices are derived from the held Works only (`in_memory`): a Work
    that is not held names no index.
    """

    def _fetch(self, work_id: str) -> WorkState | None:
        """Find a Work that is not held (and hold it); None when there is none. Here: none
        (an adapter overrides it)."""
        return None

    def __missing__(self, work_id: str) -> WorkState:
        work = self._fetch(work_id)
        if work is None:
            raise KeyError(work_id)
        return work

    def get(self, work_id: str, default: Any = None) -> Any:
        work = dict.get(self, work_id)
        if work is None:
            work = self._fetch(work_id)
        return default if work is None else work

    def prefetch(self, work_ids: Iterable[str]) -> None:
        """Find, in one go, those of `work_ids` that are not held, ahead of their lookups
        (a bulk submit asks about every Work it names, most of them new). Here: nothing
        to find (an adapter overrides it)."""

    def __contains__(self, work_id: object) -> bool:
        if dict.__contains__(self, work_id):
            return True
        return isinstance(work_id, str) and self._fetch(work_id) is not None

    def in_memory(self) -> Iterable[WorkState]:
        """The Works held now, without finding any."""
        return dict.values(self)

    def page(self, after: str, limit: int, where: WorkFilter) -> tuple[list[WorkState], str | None]:
        """A page of Works in id order after `after` (see `rota.projections.work_pages`):
        of the held ones here; an adapter pages through its store as well."""
        return page_in_memory(dict(dict.items(self)), after, limit, where)

    def forget(self, keep: Container[str]) -> int:
        """Drop every held Work not in `keep` (after a save stored them); how many."""
        gone = [work_id for work_id in dict.keys(self) if work_id not in keep]
        for work_id in gone:
            dict.__delitem__(self, work_id)
        return len(gone)


# The Work states no quiet Work can be in (`WorkState.state` against `is_quiet`): `running`
# (its attempt is live), `retry_wait` (a retry timer is due) and `ready` (startable, or its
# ended attempt still holds a slot until its stop is confirmed). Every Work in one of them
# is held, so a listing filtered by one is answered from the held Works alone, however many
# quiet ones the store keeps (a test checks the claim against `is_quiet`).
HELD_STATES: frozenset[str] = frozenset({"ready", "running", "retry_wait"})


def is_quiet(work: WorkState) -> bool:
    """Whether no index of the scheduler projection names `work` (not startable, no timer
    due, no attempt that is live or holds a slot): what `active_works()` leaves out."""
    if work.startable or work.retry.next_due is not None:
        return False
    current = work.current
    return current is None or not (current.live or current.holds_slot)


__all__ = ["HELD_STATES", "OnDemandWorks", "is_quiet"]
