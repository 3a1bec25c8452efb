"""Budgets, pure: windows, ledgers, identities and notices (rota.domain.budgets)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from rota.domain import budgets as bg
from rota.domain.events.admission import Budget, BudgetExceeded, BudgetWarning, Charge
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


def test_windows_are_utc_whatever_zone_a_time_comes_in() -> None:
    east = timezone(timedelta(hours=2))
    west = timezone(timedelta(hours=-5))
    # Monday 01:00 at +02:00 is still Sunday in UTC; Sunday 20:00 at -05:00 is Monday.
    assert bg.window(WEEK, datetime(2026, 11, 9, 1, 0, tzinfo=east)) == "2026-W45"
    assert bg.window(WEEK, datetime(2026, 11, 8, 20, 0, tzinfo=west)) == "2026-W46"
    assert bg.window(DAY, datetime(2026, 11, 9, 1, 0, tzinfo=east)) == "2026-11-08"
    assert bg.window(DAY, datetime(2026, 11, 9, 1, 0)) == "2026-11-09"  # naive: taken as UTC


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
    expected = r"budgets\[1\]: budgets\[0\] is 'usd-work-lifetime' too .* give them ids"
    with pytest.raises(ConfigError, match=expected):
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


def _notices(
    budget: Budget, amount: float, before: float, scope: str, sent: set[str]
) -> list[tuple[str, str]]:
    charge = Charge(budget.id, bg.ledger(budget, "w", scope), "lifetime", budget.unit, amount)
    emits = bg.notices([budget], [charge], "w", scope, lambda *_: before, sent)
    return [
        ("warning" if isinstance(e.event, BudgetWarning) else "exceeded", e.event.scope)
        for e in emits
        if isinstance(e.event, BudgetWarning | BudgetExceeded)
    ]


def test_a_shared_ledger_notifies_each_scope_in_its_own_scope_once() -> None:
    budget = Budget(id="all", unit="turns", max=4, per="all", warn_at=0.5)
    sent: set[str] = set()
    assert _notices(budget, 1, 1, "root/x", sent) == [("warning", "root/x")]  # crosses 2
    assert _notices(budget, 1, 2, "root/x", sent) == []  # told already
    assert _notices(budget, 1, 2, "root/y", sent) == [("warning", "root/y")]
    assert _notices(budget, 1, 3, "root/y", sent) == [("exceeded", "root/y")]
    assert _notices(budget, 1, 4, "root/x", sent) == [("exceeded", "root/x")]  # no warning
    assert _notices(budget, 1, 5, "root/z", sent) == [("exceeded", "root/z")]
    assert _notices(budget, 1, 6, "root/z", sent) == []


def test_notices_are_kept_per_limit() -> None:
    sent: set[str] = set()
    low = Budget(id="b", unit="usd", max=2, per="work", warn_at=0.5)
    assert _notices(low, 2, 0, "root", sent) == [("warning", "root"), ("exceeded", "root")]
    raised = Budget(id="b", unit="usd", max=10, per="work", warn_at=0.5)
    assert _notices(raised, 1, 2, "root", sent) == []
    assert _notices(raised, 3, 3, "root", sent) == [("warning", "root")]  # 6 >= 5, a new limit
    assert _notices(raised, 4, 6, "root", sent) == [("exceeded", "root")]


def test_a_notice_an_earlier_release_sent_stands_for_every_limit_of_its_window() -> None:
    legacy = "budget-notice/exceeded/b/work:w/lifetime/root"  # no /<limit>: written before
    budget = Budget(id="b", unit="usd", max=10, per="work")
    assert _notices(budget, 5, 10, "root", {legacy}) == []
    assert _notices(budget, 5, 10, "root", set()) == [("exceeded", "root")]


def test_a_notice_identity_names_its_limit() -> None:
    budget = Budget(id="b", unit="usd", max=0.5, per="work")
    charge = Charge("b", "work:w", "lifetime", "usd", 1)
    emit = bg.notice("exceeded", budget, charge, "root", "w", 1.0)
    assert emit.delivery_id == "budget-notice/exceeded/b/work:w/lifetime/root/0.5"
    assert isinstance(emit.event, BudgetExceeded) and emit.event.per_limit
    big = msgspec.structs.replace(budget, max=1234567.0)
    assert bg.notice("exceeded", big, charge, "root", "w", 1.0).delivery_id == (
        "budget-notice/exceeded/b/work:w/lifetime/root/1234567"
    )
