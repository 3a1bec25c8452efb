"""Bounded pages for the cadence's scans (seed 002): runtime recovery and the retry timers.

A pass takes at most one page of candidates, by default 16 and never more than 64, and
fetches one more than it takes to know whether more remain (the host then wakes its loop
again rather than waiting for its next due time). No cursor is kept across passes: each
pass starts again from the oldest candidate, so a candidate a failed pass left behind is
the first one the next pass takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from rota.domain.errors import DomainCode, Refusal

MAX_PAGE = 64
DEFAULT_PAGE = 16
T = TypeVar("T")


def check_limit(limit: int, scan: str) -> None:
    """Refuse a page size outside 1..MAX_PAGE (`scan` names the scan in the message)."""
    if not 1 <= limit <= MAX_PAGE:
        raise Refusal(
            f"{scan} page size must be 1..{MAX_PAGE}, not {limit}", code=DomainCode.INVALID_PAGE
        )


def take(ordered: Sequence[T], limit: int) -> tuple[list[T], bool]:
    """The first `limit` of `ordered`, and whether there were more (limit + 1 read)."""
    fetched = ordered[: limit + 1]
    return list(fetched[:limit]), len(fetched) > limit


def due_timers(timers: Mapping[str, datetime], now: datetime, limit: int) -> tuple[list[str], bool]:
    """The Works whose retry timer is due at `now`, earliest due first (then by Work id),
    at most `limit` of them; True if more are due."""
    check_limit(limit, "retry timer")
    due = sorted((when, work_id) for work_id, when in timers.items() if when <= now)
    page, more = take(due, limit)
    return [work_id for _, work_id in page], more
