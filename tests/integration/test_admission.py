"""Capacity pools, scope limits, budgets and start gates through the real scheduler."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

import rota
from rota.infrastructure.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


class Blocking(rota.Executor):
    """Runs until released, so attempts hold their slots while a test looks."""

    def __init__(self, name: str, pool: str) -> None:
        self.name, self.pool = name, pool
        self.release = threading.Event()

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        threading.Thread(target=lambda: (self.release.wait(30), done(rota.Result()))).start()


def open_with(url: str, clock: ManualClock, **config: Any) -> rota.Scheduler:
    return rota.open(url, clock=clock, config=config, owner="adm")


def states(s: rota.Scheduler) -> dict[str, str]:
    return {w.id: w.state for w in s.works()}


def types(s: rota.Scheduler) -> list[str]:
    return [e.type for e in s.events()]


# -- pools and scopes ------------------------------------------------------------------


def test_jobs_and_agent_turns_never_take_each_others_slots(clock: ManualClock) -> None:
    settings = {"concurrency": 1, "job_concurrency": 1}
    with open_with("memory://", clock, settings=settings) as s:
        agent, job = Blocking("agent", "agents"), Blocking("job", "jobs")
        s.register("agent", executor=agent)
        s.register("job", executor=job)
        for name in ("a1", "a2"):
            s.submit(name, binding="agent")
        for name in ("j1", "j2"):
            s.submit(name, binding="job")
        s.tick()
        assert states(s) == {"a1": "running", "a2": "ready", "j1": "running", "j2": "ready"}
        capacity = s.capacity()
        assert capacity["pools"]["agents"] == {"limit": 1, "in_use": 1, "waiting": 1, "preview": 1}
        assert capacity["pools"]["jobs"] == {"limit": 1, "in_use": 1, "waiting": 1, "preview": 1}
        codes = {w["work"]: w["code"] for w in capacity["waiting"]}
        assert codes == {"a2": "capacity_concurrency", "j2": "capacity_job_concurrency"}
        assert s.work("a2").waiting.code == "capacity_concurrency"
        agent.release.set()
        job.release.set()
        s.run_until_idle(timeout=10)
        assert set(states(s).values()) == {"completed"}


def test_waiting_is_the_last_start_pass_zero_after_a_restart_and_the_dry_run_a_preview(
    clock: ManualClock, tmp_path: Any
) -> None:
    store = f"sqlite:///{tmp_path}/capacity.db"
    settings = {"concurrency": 1}
    with open_with(store, clock, settings=settings) as s:
        agent = Blocking("agent", "agents")
        s.register("agent", executor=agent)
        s.submit("first", binding="agent")
        s.submit("second", binding="agent")
        before = s.capacity()  # no start pass has run in this process
        assert before["pools"]["agents"] == {"limit": 1, "in_use": 0, "waiting": 0, "preview": 1}
        assert before["waiting"] == []
        assert [w["work"] for w in before["preview"]] == ["second"]
        s.tick()
        after = s.capacity()
        assert after["pools"]["agents"] == {"limit": 1, "in_use": 1, "waiting": 1, "preview": 1}
        assert [(w["work"], w["code"]) for w in after["waiting"]] == [
            ("second", "capacity_concurrency")
        ]
        s.host.held.clear()  # the process dies: "first" keeps its slot in the log
    with open_with(store, clock, settings=settings) as restarted:
        restarted.register("agent", executor=Blocking("agent", "agents"))
        view = restarted.capacity()
        assert view["pools"]["agents"]["in_use"] == 1  # read from the log
        assert view["pools"]["agents"]["waiting"] == 0 and view["waiting"] == []
        assert [w["work"] for w in view["preview"]] == ["second"]
        restarted.tick()
        assert [w["work"] for w in restarted.capacity()["waiting"]] == ["second"]
    agent.release.set()


def test_scope_limits_count_the_scope_and_its_ancestors_across_pools(clock: ManualClock) -> None:
    scopes = [{"path": "root/team", "limits": {"concurrency": 1}}]
    with open_with("memory://", clock, scopes=scopes) as s:
        agent, job = Blocking("agent", "agents"), Blocking("job", "jobs")
        s.register("agent", executor=agent)
        s.register("job", executor=job)
        s.submit("deep", binding="agent", scope="root/team/project")
        s.submit("sibling", binding="job", scope="root/team/other")
        s.submit("outside", binding="job", scope="root/elsewhere")
        s.tick()
        assert states(s) == {"deep": "running", "sibling": "ready", "outside": "running"}
        assert s.work("sibling").waiting.code == "capacity_scope"
        assert s.capacity()["scopes"] == {"root/team": {"limit": 1, "in_use": 1}}
        agent.release.set()
        job.release.set()
        s.run_until_idle(timeout=10)
        assert set(states(s).values()) == {"completed"}


def test_a_declared_pool_counts_only_against_its_own_limit(clock: ManualClock) -> None:
    settings = {"concurrency": 1, "job_concurrency": 1, "pool_limits": {"gpu": 2}}
    with open_with("memory://", clock, settings=settings) as s:
        executors = [Blocking("agent", "agents"), Blocking("job", "jobs"), Blocking("gpu", "gpu")]
        for executor in executors:
            s.register(executor.name, executor=executor)
        for name in ("a1", "a2", "j1", "j2", "g1", "g2", "g3"):
            s.submit(name, binding={"a": "agent", "j": "job", "g": "gpu"}[name[0]])
        s.tick()
        assert states(s) == {
            **{"a1": "running", "a2": "ready", "j1": "running", "j2": "ready"},
            **{"g1": "running", "g2": "running", "g3": "ready"},
        }
        capacity = s.capacity()
        assert capacity["pools"]["gpu"] == {"limit": 2, "in_use": 2, "waiting": 1, "preview": 1}
        assert capacity["pools"]["agents"] == {"limit": 1, "in_use": 1, "waiting": 1, "preview": 1}
        codes = {w["work"]: w["code"] for w in capacity["waiting"]}
        assert codes == {
            "a2": "capacity_concurrency",
            "j2": "capacity_job_concurrency",
            "g3": "capacity_pool",
        }
        for executor in executors:
            executor.release.set()
        s.run_until_idle(timeout=10)
        assert set(states(s).values()) == {"completed"}


def test_a_declared_pool_without_a_limit_of_its_own_is_bounded_by_concurrency_apart(
    clock: ManualClock,
) -> None:
    with open_with("memory://", clock, settings={"concurrency": 1}) as s:
        agent, gpu = Blocking("agent", "agents"), Blocking("gpu", "gpu")
        s.register("agent", executor=agent)
        s.register("gpu", executor=gpu)
        for name in ("a1", "a2", "g1", "g2"):
            s.submit(name, binding="agent" if name[0] == "a" else "gpu")
        s.tick()
        assert states(s) == {"a1": "running", "a2": "ready", "g1": "running", "g2": "ready"}
        assert s.capacity()["pools"]["gpu"] == {"limit": 1, "in_use": 1, "waiting": 1, "preview": 1}
        assert s.work("g2").waiting.code == "capacity_concurrency"
        agent.release.set()
        gpu.release.set()
        s.run_until_idle(timeout=10)


def test_a_limit_of_zero_is_unbounded(clock: ManualClock) -> None:
    settings = {"concurrency": 0, "job_concurrency": 0, "pool_limits": {"gpu": 0}}
    with open_with("memory://", clock, settings=settings) as s:
        executors = [Blocking("agent", "agents"), Blocking("job", "jobs"), Blocking("gpu", "gpu")]
        for executor in executors:
            s.register(executor.name, executor=executor)
            for n in range(6):
                s.submit(f"{executor.name}-{n}", binding=executor.name)
        s.tick()
        assert set(states(s).values()) == {"running"}
        capacity = s.capacity()
        for pool in ("agents", "jobs", "gpu"):
            assert capacity["pools"][pool] == {"limit": 0, "in_use": 6, "waiting": 0, "preview": 0}
        assert capacity["waiting"] == []
        for executor in executors:
            executor.release.set()
        s.run_until_idle(timeout=10)


def test_scope_limits_count_named_pools_too(clock: ManualClock) -> None:
    scopes = [{"path": "root/team", "limits": {"concurrency": 2}}]
    settings = {"pool_limits": {"gpu": 0}}
    with open_with("memory://", clock, scopes=scopes, settings=settings) as s:
        agent, gpu = Blocking("agent", "agents"), Blocking("gpu", "gpu")
        s.register("agent", executor=agent)
        s.register("gpu", executor=gpu)
        s.submit("a", binding="agent", scope="root/team")
        s.submit("g1", binding="gpu", scope="root/team/deep")
        s.submit("g2", binding="gpu", scope="root/team")
        s.tick()
        assert states(s) == {"a": "running", "g1": "running", "g2": "ready"}
        assert s.work("g2").waiting.code == "capacity_scope"
        agent.release.set()
        gpu.release.set()
        s.run_until_idle(timeout=10)


# -- budgets -------------------------------------------------------------------------------


def test_budgets_are_off_by_default(clock: ManualClock) -> None:
    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: rota.Result(usage={"usd": 5.0}), inline=True)
        s.submit("w", binding="job")
        s.run_until_idle(timeout=10)
        assert not [t for t in types(s) if t.startswith("core.budget")]
        assert s.service.projection.staged == {}


def test_budget_warning_hold_reason_and_one_turn_release(clock: ManualClock) -> None:
    budgets = [{"id": "two-turns", "unit": "turns", "max": 2, "per": "work", "warn_at": 0.5}]
    with open_with("memory://", clock, budgets=budgets) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.submit("w", binding="job", kind="standing", input=1, input_key="1")
        s.run_until_idle(timeout=10)
        assert "core.budget.warning" in types(s)
        s.accept("w", 2, key="2")
        s.run_until_idle(timeout=10)
        assert types(s).count("core.budget.exceeded") == 1
        s.accept("w", 3, key="3")
        s.run_until_idle(timeout=10)
        view = s.work("w")
        assert view is not None and view.state == "held"
        (hold,) = view.holds
        assert hold.kind == "budget" and "2 of 2 turns" in hold.reason
        assert "core.budget.held" in types(s)
        s.accept("w", 4, key="4")  # input keeps queueing while held
        s.release("w")
        s.run_until_idle(timeout=10)
        view = s.work("w")
        assert view is not None and len(view.attempts) == 3  # exactly one turn let through
        s.accept("w", 5, key="5")
        s.run_until_idle(timeout=10)
        assert s.work("w").state == "held"
        assert types(s).count("core.budget.exceeded") == 1  # once per window, kind and limit
        s.cancel("w", reason="done with it")
        assert s.work("w").state == "cancelled"


def test_usage_is_charged_once_and_a_reached_budget_holds_the_next_start(
    clock: ManualClock,
) -> None:
    budgets = [{"id": "usd-day", "unit": "usd", "max": 5, "per": "all", "period": "day"}]
    with open_with("memory://", clock, budgets=budgets) as s:
        s.register("job", lambda ctx: rota.Result(usage={"usd": 3.0}), inline=True)
        s.submit("a", binding="job")
        s.run_until_idle(timeout=10)
        s.submit("b", binding="job")
        s.run_until_idle(timeout=10)
        charged = [e for e in s.events() if e.type == "core.budget.charged"]
        usage = [e for e in charged if e.data["source"] > 0]
        assert len(usage) == 2
        assert s.service.projection.used("usd-day", "all", "2026-11-02") == 6.0
        s.submit("c", binding="job")
        s.run_until_idle(timeout=10)
        assert s.work("c").state == "held"
        clock.advance(86_400)  # a new UTC day: a new ledger window
        s.release("c")
        s.run_until_idle(timeout=10)
        assert s.work("c").state == "completed"


# -- start gates -------------------------------------------------------------------------


def test_a_gate_holds_the_first_start_only_and_only_it_settles(clock: ManualClock) -> None:
    asked: list[str] = []

    def approval(work: Any, binding: Any, first: Any) -> str:
        asked.append(work.work_id)
        return "needs a human"

    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: rota.Fail("x") if ctx.attempt == 1 else None, inline=True)
        s.register_gate("approval", approval)
        s.submit("w", binding="job")
        s.run_until_idle(timeout=10)
        view = s.work("w")
        assert view is not None and view.state == "held"
        assert msgspec.to_builtins(view.holds[0]) == {
            "kind": "gate",
            "reason": "needs a human",
            "holder": "approval",
            "position": view.holds[0].position,
        }
        s.run_until_idle(timeout=10)
        assert asked == ["w"]  # held Work is not asked again
        with pytest.raises(rota.Refusal) as caught:
            s.release("w")
        assert caught.value.code == "gate_hold"
        with pytest.raises(rota.Refusal) as caught:
            s.settle_gate("w", "someone-else", admit=True)
        assert caught.value.code == "not_holder"
        s.settle_gate("w", "approval", admit=True, reason="looks fine")
        s.settle_gate("w", "approval", admit=True, reason="looks fine")  # idempotent
        s.run_until_idle(timeout=10)
        assert asked == ["w"]  # the pass skips the gates once
        assert "core.gate.released" in types(s)
        assert types(s).count("core.gate.released") == 1


def test_a_refusing_gate_cancels_the_work(clock: ManualClock) -> None:
    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("policy", lambda work, binding, first: "not today")
        s.submit("w", binding="job")
        s.run_until_idle(timeout=10)
        s.settle_gate("w", "policy", admit=False, reason="refused by policy")
        assert s.work("w").state == "cancelled"
        assert "core.gate.refused" in types(s)


def test_an_undecided_gate_fails_closed_and_ungated_work_starts(clock: ManualClock) -> None:
    def broken(work: Any, binding: Any, first: Any) -> None:
        raise RuntimeError("gate backend down")

    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("broken", broken)
        s.submit("w", binding="job")
        s.tick()
        view = s.work("w")
        assert view is not None and view.state == "ready" and view.holds == ()
        assert view.waiting.code == "start_gate"
    with rota.open("memory://", clock=clock) as control:
        control.register("job", lambda ctx: None, inline=True)
        control.submit("w", binding="job")
        control.run_until_idle(timeout=10)
        assert control.work("w").state == "completed"


def test_gates_wait_for_capacity(clock: ManualClock) -> None:
    asked: list[str] = []
    with open_with("memory://", clock, settings={"concurrency": 1}) as s:
        blocker = Blocking("block", "agents")
        s.register("block", executor=blocker)
        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("g", lambda work, binding, first: asked.append(work.work_id))
        s.submit("first", binding="block")
        s.tick()  # asks for "first" (capacity allowed it) and starts it
        s.submit("second", binding="job")
        s.tick()
        assert asked == ["first"]  # no slot: not asked
        blocker.release.set()
        s.run_until_idle(timeout=10)
        assert asked == ["first", "second"]


def test_the_gate_pass_survives_a_budget_hold(clock: ManualClock) -> None:
    budgets = [{"id": "one", "unit": "attempts", "max": 1, "per": "all"}]
    with open_with("memory://", clock, budgets=budgets) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.submit("spender", binding="job")
        s.run_until_idle(timeout=10)  # spends the only attempt
        s.register_gate("approval", lambda work, binding, first: "wait")
        s.submit("w", binding="job")
        s.run_until_idle(timeout=10)
        s.settle_gate("w", "approval", admit=True)
        s.run_until_idle(timeout=10)
        view = s.work("w")
        assert view is not None and view.state == "held"
        assert view.holds[0].kind == "budget" and view.passes == ("gate",)
        s.release("w")
        s.run_until_idle(timeout=10)
        assert s.work("w").state == "completed"


def test_a_gate_is_shown_the_recorded_input_that_would_be_the_first(clock: ManualClock) -> None:
    shown: list[tuple[str, str, rota.PendingInput]] = []

    def gate(work: rota.WorkState, binding: rota.Binding, first: rota.PendingInput) -> None:
        shown.append((work.work_id, binding.name, first))

    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("look", gate)
        s.submit("w", binding="job", input={"n": 1}, input_key="k1", correlation_key="thread-7")
        s.run_until_idle(timeout=10)
        accepted = next(e for e in s.events() if e.type == "core.work.submitted")  # (carried)
        assert shown == [
            ("w", "job", rota.PendingInput(accepted.position, "k1", {"n": 1}, "thread-7"))
        ]
        assert s.work("w").state == "completed"


@pytest.mark.parametrize(("trigger", "expected"), [("all", "1"), ("first", "1"), ("last", "3")])
def test_a_gate_is_shown_the_input_that_would_trigger_the_attempt(
    clock: ManualClock, trigger: str, expected: str
) -> None:
    shown: list[str] = []
    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("look", lambda work, binding, first: shown.append(first.key))
        s.submit("w", binding="job", kind="standing", trigger=trigger, input=1, input_key="1")
        s.accept("w", 2, key="2")
        s.accept("w", 3, key="3")
        s.tick()
        assert shown == [expected]  # the trigger, not merely the oldest pending input
        assert triggered_by(s, "w") == expected


def triggered_by(s: rota.Scheduler, work_id: str) -> str | None:
    """The key of the input that triggered the Work's latest attempt."""
    attempt = s.service.projection.works[work_id].current
    assert attempt is not None
    return attempt.trigger.key if attempt.trigger is not None else None


def test_gates_are_asked_in_name_order_and_the_first_hold_decides(clock: ManualClock) -> None:
    asked: list[tuple[str, str]] = []

    def gate(name: str, hold: str | None) -> rota.Gate:
        def ask(work: rota.WorkState, binding: rota.Binding, first: rota.PendingInput) -> Any:
            asked.append((name, work.work_id))
            return rota.StartHold(hold) if hold and work.work_id == "held" else None

        return ask

    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        for name, hold in (("zeta", "zeta says no"), ("alpha", None), ("mid", "mid says no")):
            s.register_gate(name, gate(name, hold))  # registered out of name order
        s.submit("held", binding="job")
        s.run_until_idle(timeout=10)
        assert asked == [("alpha", "held"), ("mid", "held")]  # zeta is never asked
        view = s.work("held")
        assert view is not None and view.state == "held"
        assert [(h.holder, h.reason) for h in view.holds] == [("mid", "mid says no")]
        asked.clear()
        s.submit("free", binding="job")
        s.run_until_idle(timeout=10)
        assert asked == [("alpha", "free"), ("mid", "free"), ("zeta", "free")]
        assert s.work("free").state == "completed"


def test_the_first_gate_that_fails_to_decide_decides(clock: ManualClock) -> None:
    asked: list[str] = []

    def broken(work: rota.WorkState, binding: rota.Binding, first: rota.PendingInput) -> None:
        asked.append("a")
        raise RuntimeError("gate backend down")

    def holding(work: rota.WorkState, binding: rota.Binding, first: rota.PendingInput) -> str:
        asked.append("b")
        return "b holds"

    with open_with("memory://", clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("b", holding)
        s.register_gate("a", broken)
        s.submit("w", binding="job")
        s.tick()
        assert asked == ["a"]
        view = s.work("w")
        assert view is not None and view.state == "ready" and view.holds == ()
        assert view.waiting.code == "start_gate" and "start gate a" in view.waiting.detail


def test_a_gate_is_asked_again_when_the_trigger_changed_before_its_answer_was_used(
    clock: ManualClock,
) -> None:
    shown: list[str] = []
    with open_with("memory://", clock) as s:

        def gate(work: rota.WorkState, binding: rota.Binding, first: rota.PendingInput) -> None:
            shown.append(first.key)
            if len(shown) == 1:
                s.accept("w", "newer", key="newer")  # arrives while the gate is asked

        s.register("job", lambda ctx: None, inline=True)
        s.register_gate("look", gate)
        s.submit("w", binding="job", kind="standing", trigger="last", input="old", input_key="old")
        s.tick()
        assert shown == ["old", "newer"]  # the answer about "old" was not used for "newer"
        assert triggered_by(s, "w") == "newer"
