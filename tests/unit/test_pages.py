"""The cadence's pages (seed 002): default 16, hard cap 64, limit + 1 to know there is more."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rota.domain import pages
from rota.domain.errors import DomainCode, Refusal

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def test_the_bounds_are_sixteen_by_default_and_sixty_four_at_most() -> None:
    assert (pages.DEFAULT_PAGE, pages.MAX_PAGE) == (16, 64)
    for limit in (0, -1, 65):
        with pytest.raises(Refusal) as refused:
            pages.due_timers({}, NOW, limit)
        assert refused.value.code == DomainCode.INVALID_PAGE
        assert "retry timer page size must be 1..64" in str(refused.value)
    assert pages.due_timers({}, NOW, 64) == ([], False)


def test_due_timers_come_earliest_first_and_only_when_due() -> None:
    timers = {
        "late": NOW,
        "early": NOW - timedelta(minutes=5),
        "tie-b": NOW - timedelta(minutes=1),
        "tie-a": NOW - timedelta(minutes=1),
        "future": NOW + timedelta(microseconds=1),
    }
    assert pages.due_timers(timers, NOW, 16) == (["early", "tie-a", "tie-b", "late"], False)


def test_a_page_reads_one_more_to_know_there_is_more() -> None:
    timers = {f"w{i:02}": NOW - timedelta(seconds=i) for i in range(20)}
    first, more = pages.due_timers(timers, NOW, pages.DEFAULT_PAGE)
    assert len(first) == 16 and more
    assert first[0] == "w19"  # the oldest due first
    exactly, more = pages.due_timers(dict(list(timers.items())[:16]), NOW, 16)
    assert len(exactly) == 16 and not more  # a full page with nothing after it
    assert pages.take([1, 2, 3], 2) == ([1, 2], True)
    assert pages.take([1, 2], 2) == ([1, 2], False)
