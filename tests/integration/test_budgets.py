"""Budgets through the real scheduler: windows, ledgers, notices, identity, configuration."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.domain.events.admission import Budget
from rota.infrastructure.clock import ManualClock

SUNDAY = datetime(2026, 11, 8, 23, 0, tzinfo=UTC)  # the last hour of ISO week 2026-W45


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(SUNDAY)


def open_with(path: str, clock: ManualClock, budgets: list[dict[str, Any]]) -> rota.Scheduler:
    s = rota.open(path, clock=clock, config={"budgets": budgets}, owner="budgets")
    s.register("job", lambda ctx: rota.Result(usage=ctx.trigger or {}), inline=True)
    return s


def run(s: rota.Scheduler, work: str, scope: str = "root", usage: Any = None) -> str:
    """Submit a run-once Work and run until idle; its state."""
    s.submit(work, binding="job", scope=scope, input=usage)
    s.run_until_idle(timeout=10)
    return state(s, work)


def state(s: rota.Scheduler, work: str) -> str:
    view = s.work(work)
    assert view is not None
    return str(view.state)


def notices(s: rota.Scheduler) -> list[tuple[str, str, float]]:
    """(kind, scope, limit) of every budget notice, in log order."""
    return [
        (e.type.rsplit(".", 1)[1], e.data["scope"], e.data["limit"])
        for e in s.events()
        if e.type in ("core.budget.warning", "core.budget.exceeded")
    ]


def configured(s: rota.Scheduler) -> list[list[dict[str, Any]]]:
    return [e.data["budgets"] for e in s.events() if e.type == "core.budget.configured"]


# -- windows and ledgers ---------------------------------------------------------------


def test_a_weekly_ledger_turns_over_at_monday_00_00_utc(clock: ManualClock) -> None:
    budgets = [{"unit": "turns", "max": 2, "per": "all", "period": "week"}]
    with open_with("memory://", clock, budgets) as s:
        assert run(s, "a") == "completed"
        clock.advance(30 * 60)
        assert run(s, "b") == "completed"
        clock.set(datetime(2026, 11, 8, 23, 59, 59, tzinfo=UTC))
        assert run(s, "c") == "held"  # the week's two turns are spent
        clock.advance(1)  # Monday 2026-11-09 00:00:00 UTC: week 46
        assert run(s, "d") == "completed"
        used = s.service.projection.used
        assert used("turns-all-week", "all", "2026-W45") == 2
        assert used("turns-all-week", "all", "2026-W46") == 1
        assert state(s, "c") == "held"  # a hold waits for its release, whatever the window


def test_per_scope_ledgers_are_one_per_scope(clock: ManualClock) -> None:
    budgets = [{"unit": "attempts", "max": 1, "per": "scope"}]
    with open_with("memory://", clock, budgets) as s:
        assert run(s, "x1", "root/x") == "completed"
        assert run(s, "y1", "root/y") == "completed"  # another scope, another ledger
        assert run(s, "x2", "root/x") == "held"
        assert run(s, "deeper", "root/x/sub") == "completed"  # a scope of its own
        used = s.service.projection.used
        ledgers = ("scope:root/x", "scope:root/y", "scope:root/x/sub")
        assert [used("attempts-scope-lifetime", k, "lifetime") for k in ledgers] == [1, 1, 1]


def test_a_narrowed_per_scope_ledger_is_shared_by_its_subtree_only(clock: ManualClock) -> None:
    budgets = [{"unit": "attempts", "max": 2, "per": "scope", "scope": "root/team"}]
    with open_with("memory://", clock, budgets) as s:
        assert run(s, "p", "root/team/p") == "completed"
        assert run(s, "q", "root/team/q") == "completed"
        assert run(s, "r", "root/team") == "held"  # the subtree's one ledger is spent
        assert run(s, "outside", "root/other") == "completed"  # not narrowed to it
        used = s.service.projection.used
        assert used("attempts-scope-lifetime-root.team", "scope:root/team", "lifetime") == 2


def test_a_per_all_budget_notifies_each_scope_in_its_own_scope(clock: ManualClock) -> None:
    budgets = [{"unit": "turns", "max": 4, "per": "all", "warn_at": 0.5}]
    with open_with("memory://", clock, budgets) as s:
        for work, scope in (("a", "root/x"), ("b", "root/x"), ("c", "root/y"), ("d", "root/y")):
            assert run(s, work, scope) == "completed"
        assert run(s, "e", "root/x") == "held"
        assert run(s, "f", "root/y") == "held"
        assert notices(s) == [
            ("warning", "root/x", 4),  # b's turn crossed 2 of 4
            ("warning", "root/y", 4),  # c's turn, the first charged in root/y
            ("exceeded", "root/y", 4),  # d's turn reached 4
            ("exceeded", "root/x", 4),  # e's held start (root/x was not told yet)
        ]
        for event in s.events():
            if event.type in ("core.budget.warning", "core.budget.exceeded"):
                assert event.stream == "budget/notices"  # named, never addressed to it


# -- a budget's identity and its max -----------------------------------------------------


def test_a_limit_lowered_below_what_was_used_holds_the_next_start(
    memory_url: str, clock: ManualClock
) -> None:
    path = memory_url
    with open_with(path, clock, [{"unit": "turns", "max": 3, "per": "work"}]) as s:
        s.submit("w", binding="job", kind="standing", input={}, input_key="1")
        s.run_until_idle(timeout=10)
        s.accept("w", {}, key="2")
        s.run_until_idle(timeout=10)
        assert notices(s) == []
    with open_with(path, clock, [{"unit": "turns", "max": 1, "per": "work"}]) as s:
        assert [[b["max"] for b in c] for c in configured(s)] == [[3], [1]]
        assert s.service.projection.used("turns-work-lifetime", "work:w", "lifetime") == 2
        s.accept("w", {}, key="3")
        s.run_until_idle(timeout=10)
        view = s.work("w")
        assert view is not None and view.state == "held" and len(view.attempts) == 2
        assert "2 of 1 turns" in view.holds[0].reason
        assert notices(s) == [("exceeded", "root", 1)]  # the hold path tells it


def test_a_raised_limit_keeps_the_ledger_and_notifies_at_the_new_limit(
    memory_url: str, clock: ManualClock
) -> None:
    path = memory_url
    with open_with(path, clock, [{"unit": "turns", "max": 1, "per": "all"}]) as s:
        assert run(s, "a") == "completed"
        assert run(s, "b") == "held"
        s.cancel("b")
    with open_with(path, clock, [{"unit": "turns", "max": 2, "per": "all"}]) as s:
        assert run(s, "c") == "completed"  # 1 used of 2: admitted, and 2 reached
        assert run(s, "d") == "held"
        assert notices(s) == [("exceeded", "root", 1), ("exceeded", "root", 2)]


def test_a_log_whose_budget_id_an_earlier_release_derived_keeps_its_ledger(
    memory_url: str, clock: ManualClock
) -> None:
    path = memory_url
    with open_with(path, clock, []) as s:
        # What a release that put the max in derived ids recorded for this id-less budget.
        legacy = Budget(id="turns-work-lifetime-3", unit="turns", max=3, per="work")
        s.service.admission.configure_budgets([legacy])
        s.submit("w", binding="job", kind="standing", input={}, input_key="1")
        s.run_until_idle(timeout=10)
        s.accept("w", {}, key="2")
        s.run_until_idle(timeout=10)
    with open_with(path, clock, [{"unit": "turns", "max": 3, "per": "work"}]) as s:
        assert len(configured(s)) == 1  # the same budget: nothing recorded
    with open_with(path, clock, [{"unit": "turns", "max": 2, "per": "work"}]) as s:
        assert [[(b["id"], b["max"]) for b in c] for c in configured(s)][-1] == [
            ("turns-work-lifetime-3", 2)
        ]
        s.accept("w", {}, key="3")
        s.run_until_idle(timeout=10)
        assert state(s, "w") == "held"  # 2 of 2: the ledger went on
    with open_with(path, clock, [{"unit": "turns", "max": 2, "per": "work"}]) as s:
        assert len(configured(s)) == 2  # and it stays so on every later open


# -- a ledger counts from the time its budget is first configured --------------------------


def test_usage_before_any_budget_is_never_charged(memory_url: str, clock: ManualClock) -> None:
    path = memory_url
    with open_with(path, clock, []) as s:
        assert run(s, "before", usage={"usd": 4.0}) == "completed"
    budgets = [{"unit": "usd", "max": 5, "per": "all"}]
    with open_with(path, clock, budgets) as s:
        assert s.service.projection.used("usd-all-lifetime", "all", "lifetime") == 0
        assert run(s, "after", usage={"usd": 4.0}) == "completed"  # 4 of 5: not reached
        assert s.service.projection.used("usd-all-lifetime", "all", "lifetime") == 4
        assert run(s, "more") == "completed"
        assert run(s, "again", usage={"usd": 1.0}) == "completed"
        assert run(s, "last") == "held"


def test_a_budget_added_later_is_not_charged_usage_that_finished_before_it(
    memory_url: str, clock: ManualClock
) -> None:
    path = memory_url
    tokens = {"unit": "tokens", "max": 1000, "per": "all"}
    with open_with(path, clock, [tokens]) as s:
        s.submit("w", binding="job", input={"usd": 3.0, "tokens": 10.0})
        (claimed,) = s.service.lifecycle.start_pass().claimed
        attempt = claimed.attempt
        # The outcome is recorded and its usage staged; the daemon stops before settling it.
        usage = {"usd": 3.0, "tokens": 10.0}
        refused = s.service.lifecycle.finish_many(
            [(attempt.execution_id, attempt.epoch, rota.Result(usage=usage))]
        )
        assert not refused and s.service.projection.staged
    usd = {"unit": "usd", "max": 5, "per": "all"}
    with open_with(path, clock, [tokens, usd]) as s:
        used = s.service.projection.used
        assert used("tokens-all-lifetime", "all", "lifetime") == 10  # charged under the old
        assert used("usd-all-lifetime", "all", "lifetime") == 0  # configured after it finished
        assert not s.service.projection.staged
        charged = [e for e in s.events() if e.type == "core.budget.charged"]
        assert charged[-1].position < s.events()[-1].position  # before the new budgets


# -- usage a shell script reports ------------------------------------------------------------


def test_usage_a_shell_result_line_reports_is_charged() -> None:
    line = '{"rota.result": {"usage": {"usd": 2.5}}}'
    clock = ManualClock(datetime.now(UTC))  # the shell executor judges deadlines by real time
    with open_with("memory://", clock, [{"unit": "usd", "max": 5, "per": "all"}]) as s:
        s.bind("script", executor="shell", config={"command": ["sh", "-c", f"echo '{line}'"]})
        for work in ("one", "two", "three"):
            s.submit(work, binding="script")
            s.run_until_idle(timeout=30)
        assert [state(s, w) for w in ("one", "two", "three")] == ["completed", "completed", "held"]
        assert s.service.projection.used("usd-all-lifetime", "all", "lifetime") == 5
