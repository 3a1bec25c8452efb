"""Handoff continuation end to end: a standing Work whose binding continues its handoffs
runs its next attempt on its own handoff's data, with no outside input."""

from __future__ import annotations

import rota


def test_a_standing_work_continues_from_its_handoffs_until_it_completes() -> None:
    seen: list[object] = []

    def step(ctx: rota.LaunchContext) -> rota.Result:
        seen.append(ctx.trigger)
        n = ctx.trigger["step"]
        if n < 3:
            return rota.Result(outcome="handoff", data={"step": n + 1})
        return rota.Result(data={"done_at": n})

    with rota.open("memory://") as scheduler:
        scheduler.register("step", step, handoff="continue")
        scheduler.submit("w", binding="step", kind="standing", input={"step": 1})
        scheduler.run_until_idle(timeout=30)
        work = scheduler.work("w")
        types = [e.type for e in scheduler.events()]
    assert seen == [{"step": 1}, {"step": 2}, {"step": 3}]
    assert work is not None
    assert [a.outcome for a in work.attempts] == ["handoff", "handoff", "completed"]
    assert types.count("core.execution.handoff") == 2


def test_without_continue_a_handoff_waits_for_outside_input() -> None:
    with rota.open("memory://") as scheduler:
        scheduler.register("step", lambda ctx: rota.Result(outcome="handoff", data={"n": 1}))
        scheduler.submit("w", binding="step", kind="standing", input={"step": 1})
        scheduler.run_until_idle(timeout=30)
        work = scheduler.work("w")
    assert work is not None and len(work.attempts) == 1
    assert work.state == "idle"
