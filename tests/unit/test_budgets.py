"""Budgets, pure: windows, ledgers, identities and notices (rota.domain.budgets)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rota.domain import budgets as bg
from rota.domain.events.admission import Budget
from rota.infrastructure.config import Config, ConfigError

WEEK = Budget(id="w", unit="usd", max=10, per="all", period="week")
DAY = Budget(id="d", unit="usd", max=10, per="all", period="day")


# -- windows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "window"),
    [
        (datetime(2026, 11, 8, 23, 59, 59, 999999, tzinfo=UTC), "2026-W45"),  # a Sunday
        (datetime(2026, 11, 9, 0, 0, tzinfo=UTC), "2026-W46"),  # Monday 00:00 UTC
        (datetime(2027, 1, 3, 12, 0, tzinfo=UTC), "2026-W53"),  # ISO year, not calendar
        (datetime(2027, 1, 4, 0, 0, tzinfo=UTC), "2027-W01"),
        (datetime(2025, 12, 29, 0, 0, tzinfo=UTC), "2026-W01"),
    ],
)
def test_weekly_windows_are_iso_weeks_from_monday_00_00_utc(at: datetime, window: str) -> None:
    assert bg.window(WEEK, at) == window


# -- ledgers ---------------------------------------------------------------------------


def test_ledgers_per_work_per_scope_narrowed_and_shared_by_all() -> None:
    per_work = Budget(id="a", unit="usd", max=1, per="work")
    per_scope = Budget(id="b", unit="usd", max=1, per="scope")
    narrowed = Budget(id="c", unit="usd", max=1, per="scope", scope="root/team")
    shared = Budget(id="e", unit="usd", max=1, per="all")
    assert bg.ledger(per_work, "w1", "root/team/p") == "work:w1"
    assert bg.ledger(per_scope, "w1", "root/team/p") == "scope:root/team/p"
    assert bg.ledger(per_scope, "w2", "root/team/q") == "scope:root/team/q"
    assert bg.ledger(narrowed, "w1", "root/team/p") == "scope:root/team"  # the subtree's one
    assert bg.applies(narrowed, "root/team") and bg.applies(narrowed, "root/team/p")
    assert not bg.applies(narrowed, "root/teamwork") and not bg.applies(narrowed, "root")
    assert bg.ledger(shared, "w1", "root/x") == bg.ledger(shared, "w2", "root/y") == "all"


# -- identity --------------------------------------------------------------------------


def test_a_budget_without_an_id_is_named_by_unit_per_period_and_scope_not_max() -> None:
    def ids(**budget: object) -> str:
        return Config.parse({"budgets": [budget]}).budgets[0].id

    assert ids(unit="usd", max=50, per="work", period="day") == "usd-work-day"
    assert ids(unit="usd", max=40, per="work", period="day") == "usd-work-day"
    assert ids(unit="usd", max=5, per="scope", scope="root/team") == "usd-scope-lifetime-root.team"
    assert ids(unit="usd", max=5, id="mine") == "mine"


def test_two_id_less_budgets_that_differ_only_in_max_need_ids() -> None:
    budgets = [{"unit": "usd", "max": 5}, {"unit": "usd", "max": 9}]
    with pytest.raises(ConfigError, match=r"both 'usd-work-lifetime' .* give them ids"):
        Config.parse({"budgets": budgets})


def test_an_id_an_earlier_release_derived_with_the_max_is_kept() -> None:
    legacy = Budget(id="usd-work-day-50", unit="usd", max=50, per="work", period="day")
    scoped = Budget(id="usd-scope-week-2.5-root.t", unit="usd", max=2.5, per="scope",
                    period="week", scope="root/t")  # fmt: skip
    lowered = Budget(id="usd-work-day", unit="usd", max=40, per="work", period="day")
    wider = Budget(id="usd-scope-week-root.t", unit="usd", max=9, per="scope", period="week",
                   scope="root/t")  # fmt: skip
    kept = bg.keep_ids([lowered, wider], [legacy, scoped])
    assert [b.id for b in kept] == ["usd-work-day-50", "usd-scope-week-2.5-root.t"]
    assert [b.max for b in kept] == [40, 9]
    assert bg.keep_ids(kept, kept) == kept  # and on every later start
    assert bg.keep_ids([lowered], kept) == kept[:1]


def test_only_an_id_less_budget_takes_an_earlier_derived_id() -> None:
    legacy = Budget(id="usd-work-day-50", unit="usd", max=50, per="work", period="day")
    named = Budget(id="daily", unit="usd", max=40, per="work", period="day")
    assert bg.keep_ids([named], [legacy]) == (named,)
    other_period = Budget(id="usd-work-week", unit="usd", max=40, per="work", period="week")
    assert bg.keep_ids([other_period], [legacy]) == (other_period,)
    explicit = Budget(id="usd-work-day-50", unit="usd", max=1, per="all")  # claims that id
    lowered = Budget(id="usd-work-day", unit="usd", max=40, per="work", period="day")
    assert bg.keep_ids([explicit, lowered], [legacy]) == (explicit, lowered)
    unrelated = Budget(id="usd-work-day-nightly", unit="usd", max=50, per="work", period="day")
    assert bg.keep_ids([lowered], [unrelated]) == (lowered,)


# -- notices ---------------------------------------------------------------------------
