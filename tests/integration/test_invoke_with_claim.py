"""A host whose executor is called as soon as the claim is durable writes the invoke marker
in the claim (`LifecycleCommands.start_pass(invoke=...)`: `core.execution.claimed` with
`invoked`): one append, no `core.execution.invoked`. With a run-environment hook between
them (or an attempt this host has no executor for) the marker is its own later append, as
before."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import rota
from rota.domain.events import AttemptClaimed, Invoked
from rota.domain.state import AttemptState, WorkState
from rota.infrastructure.clock import ManualClock


def clock() -> ManualClock:
    return ManualClock(datetime(2026, 8, 1, 9, tzinfo=UTC))


def test_the_claims_carry_the_invoke_markers() -> None:
    config: dict[str, Any] = {"settings": {"concurrency": 2}}
    with rota.open("memory://", clock=clock(), config=config) as scheduler:
        scheduler.register("job", lambda ctx: None, inline=True)
        for k in range(2):
            scheduler.submit(f"w-{k}", binding="job", input={"k": k})
        head = scheduler.store.head().position
        appends = scheduler.service.transactions.appends
        started = scheduler.tick()  # the first pass: nothing to observe, two to start
        assert started.started == 2
        assert scheduler.service.transactions.appends == appends + 1  # claims and markers
        recorded = scheduler.store.read(head, 100)
        claims = [r.event for r in recorded if isinstance(r.event, AttemptClaimed)]
        assert [c.invoked for c in claims] == [Invoked(isolated=False)] * 2
        assert "core.execution.invoked" not in {r.type for r in recorded}
        scheduler.run_until_idle()
        assert {w.state for w in scheduler.works()} == {"completed"}
        for k in range(2):
            segment = scheduler.service.projection.works[f"w-{k}"].attempts[0].segments[0]
            assert segment.invoke == "called" and segment.isolated is False


def test_a_run_environment_hook_keeps_the_marker_after_it() -> None:
    seen: list[str] = []

    def environment(work: WorkState, attempt: AttemptState) -> dict[str, str]:
        # Between the claim and the marker: the claim is durable, the marker not written.
        found = scheduler.service.projection.works[work.work_id].attempts[-1]
        seen.append(str(found.segments[-1].invoke))
        return {}

    with rota.open("memory://", clock=clock(), environment=environment) as scheduler:
        scheduler.register("job", lambda ctx: None, inline=True)
        scheduler.submit("w", binding="job", input={})
        scheduler.run_until_idle()
        assert seen == ["pending"]
        assert scheduler.work("w").state == "completed"
        recorded = scheduler.store.read(0, 100)
        claim = next(r.event for r in recorded if isinstance(r.event, AttemptClaimed))
        assert claim.invoked is None  # the hook ran between: the marker is its own event
        assert [r.type for r in recorded].count("core.execution.invoked") == 1


def test_without_its_executor_the_claim_writes_no_marker() -> None:
    with rota.open("memory://", clock=clock()) as scheduler:
        scheduler.register("job", lambda ctx: None, inline=True)
        scheduler.submit("here", binding="job", input={})
        lifecycle, launches = scheduler.service.lifecycle, scheduler.host.launches
        invoke = launches.invoked_with_claim
        claimed = lifecycle.start_pass(invoke=invoke).claimed
        assert [c.attempt.segments[-1].invoke for c in claimed] == ["called"]
        scheduler.submit("gone", binding="job", input={})
        scheduler.host.directory.executors.pop("job")  # this host has no executor for it
        assert invoke(scheduler.service.configuration.pinned_for("job")) is None
        claimed = lifecycle.start_pass(invoke=invoke).claimed
        assert [c.attempt.segments[-1].invoke for c in claimed] == ["pending"]


def test_results_reported_during_a_launch_batch_wake_the_loop_once_it_is_through() -> None:
    config: dict[str, Any] = {"settings": {"concurrency": 3}}
    with rota.open("memory://", clock=clock(), config=config) as scheduler:
        seen: list[bool] = []
        wake = scheduler.host.wake

        def job(ctx: rota.LaunchContext) -> None:
            seen.append(wake.is_set())  # the results before this one's did not set it yet

        scheduler.register("job", job, inline=True)
        for k in range(3):
            scheduler.submit(f"w-{k}", binding="job", input={"k": k})
        wake.clear()
        assert scheduler.tick().started == 3
        assert seen == [False, False, False]
        assert wake.is_set()  # once, after the batch: the next pass observes all three
        assert scheduler.host.results.qsize() == 3
        # Outside a batch a result sets it at once, as before.
        wake.clear()
        launches = scheduler.host.launches
        held = next(iter(launches.held.values()))
        launches.done(held)(rota.Result())
        assert wake.is_set()
        scheduler.run_until_idle()
        assert {w.state for w in scheduler.works()} == {"completed"}
