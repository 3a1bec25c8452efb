"""Scenarios of the attempt lifecycle: Work, input, claim, leases, segments, outcomes, turns."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain import lifecycle as lc
from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptResumed,
    InputAccepted,
    LaunchInvoked,
    LeaseRenewed,
    RetryArmed,
    TurnPublished,
    WorkSubmitted,
)
from rota.domain.policy import RetryPolicy
from rota.domain.results import Result

from .harness import T0, Story, events, pinned


def submitted(work: str = "w", **kw: str) -> lc.Emit:
    return lc.submit(None, lc.SubmitWork(work_id=work, scope="root/team", binding="b", **kw))[0]


def started(story: Story, **pin: object) -> AttemptClaimed:
    (emit,) = story.when(lambda w: lc.claim(w, now=story.now, owner="h1", pinned=pinned(**pin)))
    assert isinstance(emit.event, AttemptClaimed)
    return emit.event


def story_with_input(n: int = 1, **kw: str) -> Story:
    story = Story().given(submitted(**kw))
    for i in range(n):
        story.given(lc.accept_input(story.work, work_id="w", payload={"i": i}, key=f"k{i}"))
    return story


# -- Work and input --------------------------------------------------------------------


def test_submit_defines_the_work_once() -> None:
    story = Story()
    (emit,) = story.when(
        lambda w: lc.submit(
            w, lc.SubmitWork(work_id="w", scope="root/team", binding="b", kind="standing")
        )
    )
    assert emit.stream == "work/w"
    assert emit.event == WorkSubmitted(work_id="w", scope="root/team", binding="b", kind="standing")
    assert (
        lc.submit(
            story.work, lc.SubmitWork(work_id="w", scope="root/team", binding="b", kind="standing")
        )
        == []
    )
    story.refused(
        lambda w: lc.submit(w, lc.SubmitWork(work_id="w", scope="root/team", binding="other")),
        "work_conflict",
    )


@pytest.mark.parametrize("bad", ["", "-x", "a b", "x" * 200, "a/b"])
def test_bad_work_ids_are_refused(bad: str) -> None:
    Story().refused(
        lambda w: lc.submit(w, lc.SubmitWork(work_id=bad, scope="root", binding="b")),
        "invalid_work_id",
    )


def test_bad_kind_is_refused_with_the_field() -> None:
    error = Story().refused(
        lambda w: lc.submit(w, lc.SubmitWork(work_id="w", scope="root", binding="b", kind="daily")),
        "invalid_work",
    )
    assert "kind" in str(error)


def test_input_has_a_delivery_identity_from_its_key_or_payload() -> None:
    story = Story().given(submitted())
    explicit = lc.accept_input(story.work, work_id="w", payload=1, key="order-7")
    assert explicit.delivery_id == "input/w/order-7"
    derived_a = lc.accept_input(story.work, work_id="w", payload={"a": 1, "b": 2})
    derived_b = lc.accept_input(story.work, work_id="w", payload={"b": 2, "a": 1})
    assert derived_a.delivery_id == derived_b.delivery_id
    assert derived_a.delivery_id != lc.accept_input(story.work, work_id="w", payload=2).delivery_id


def test_input_for_unknown_or_finished_work_is_refused() -> None:
    Story().refused(lambda w: lc.accept_input(w, work_id="w", payload=1), "unknown_work")
    story = story_with_input()
    claim = started(story)
    story.when(lambda w: lc.finish(w, claim.attempt, 1, story.now, Result()))
    assert story.state.state == "completed"
    story.refused(lambda w: lc.accept_input(w, work_id="w", payload=2), "work_terminal")


def test_oversized_input_is_refused() -> None:
    story = Story().given(submitted())
    story.refused(
        lambda w: lc.accept_input(w, work_id="w", payload="x" * (300 * 1024)), "payload_too_large"
    )


# -- start ------------------------------------------------------------------------------


def test_claim_consumes_the_ordered_pending_input_and_pins_the_snapshot() -> None:
    story = story_with_input(3)
    claim = started(story, timeout=600.0)
    assert claim.attempt == 1 and claim.epoch == 1 and claim.owner == "h1"
    assert claim.consumed == [2, 3, 4] and claim.trigger == 2
    assert claim.lease_expires_at == T0 + timedelta(seconds=60)
    assert claim.deadline == T0 + timedelta(seconds=600)
    assert claim.pinned.generation == "gen1"
    work = story.state
    assert work.state == "running" and work.pending == ()
    segment = work.current.segments[0]  # type: ignore[union-attr]
    assert (segment.kind, segment.invoke, segment.started_at) == ("start", "pending", T0)


@pytest.mark.parametrize(
    ("trigger", "consumed", "trigger_at"),
    [("all", [2, 3, 4], 2), ("first", [2], 2), ("last", [2, 3, 4], 4)],
)
def test_trigger_selector_chooses_the_input(
    trigger: str, consumed: list[int], trigger_at: int
) -> None:
    story = story_with_input(3, trigger=trigger)
    claim = started(story)
    assert (claim.consumed, claim.trigger) == (consumed, trigger_at)


def test_idle_and_running_work_cannot_start() -> None:
    story = Story().given(submitted())
    story.refused(lambda w: lc.claim(w, now=T0, owner="h", pinned=pinned()), "not_eligible")
    story.given(lc.accept_input(story.work, work_id="w", payload=1))
    started(story)
    story.given(lc.accept_input(story.work, work_id="w", payload=2))
    story.refused(lambda w: lc.claim(w, now=T0, owner="h", pinned=pinned()), "not_eligible")


def test_attempt_numbers_are_monotonic_and_completed_work_cannot_overtake_input() -> None:
    story = story_with_input(1)
    first = started(story)
    story.given(lc.accept_input(story.work, work_id="w", payload="late", key="late"))
    story.when(lambda w: lc.finish(w, first.attempt, 1, story.now, Result()))
    assert story.state.state == "ready"
    second = started(story)
    assert second.attempt == 2 and second.consumed == [4]


# -- fencing and leases ---------------------------------------------------------------


def test_invoke_is_fenced_and_written_once() -> None:
    story = story_with_input()
    started(story)
    (emit,) = story.when(lambda w: lc.invoke(w, 1, 1, story.now, False))
    assert emit.event == LaunchInvoked(work_id="w", attempt=1, epoch=1, isolated=False)
    assert story.state.current.segments[-1].invoke == "called"  # type: ignore[union-attr]
    assert story.state.state == "running"
    story.refused(lambda w: lc.invoke(w, 1, 1, story.now, False), "invoked")
    story.refused(lambda w: lc.invoke(w, 1, 2, story.now, False), "lease_lost")
    story.refused(lambda w: lc.invoke(w, 2, 1, story.now, False), "lease_lost")


def test_writes_after_expiry_are_refused_exactly_at_the_expiry() -> None:
    story = story_with_input()
    started(story)
    story.at(59.999999)
    story.when(lambda w: lc.begin_phase(w, 1, 1, story.now, "executor"))
    story.at(60)
    story.refused(lambda w: lc.renew(w, 1, 1, story.now), "lease_lost")
    story.refused(lambda w: lc.finish(w, 1, 1, story.now, Result()), "lease_lost")


def test_renewal_extends_and_never_shortens_when_the_clock_steps_back() -> None:
    story = story_with_input()
    started(story)
    story.at(30)
    (emit,) = story.when(lambda w: lc.renew(w, 1, 1, story.now))
    assert emit.event == LeaseRenewed(
        work_id="w", attempt=1, epoch=1, lease_expires_at=T0 + timedelta(seconds=90)
    )
    story.at(-3600)
    (emit,) = story.when(lambda w: lc.renew(w, 1, 1, story.now))
    assert emit.event.lease_expires_at == T0 + timedelta(seconds=90)  # type: ignore[attr-defined]


def test_release_makes_every_later_write_stale() -> None:
    story = story_with_input()
    started(story)
    story.when(lambda w: lc.release(w, 1, 1, story.now, "host_stopped"))
    assert story.state.current.released  # type: ignore[union-attr]
    story.refused(lambda w: lc.renew(w, 1, 1, story.now), "lease_lost")
    story.refused(lambda w: lc.finish(w, 1, 1, story.now, Result()), "lease_lost")


def test_launch_phases_are_recorded_as_they_begin_and_end() -> None:
    story = story_with_input()
    started(story)
    story.when(lambda w: lc.begin_phase(w, 1, 1, story.now, "environment"))
    story.at(2)
    story.when(lambda w: lc.end_phase(w, 1, 1, story.now, "environment", "ok"))
    story.when(lambda w: lc.begin_phase(w, 1, 1, story.now, "executor"))
    phases = story.state.current.segments[-1].phases  # type: ignore[union-attr]
    assert [(p.name, p.outcome) for p in phases] == [("environment", "ok"), ("executor", None)]
    assert phases[0].ended_at == T0 + timedelta(seconds=2)
    story.refused(lambda w: lc.begin_phase(w, 1, 1, story.now, "Bad Name"), "invalid_phase")


def test_a_segment_records_at_most_max_launch_phases() -> None:
    story = story_with_input()
    started(story)
    for n in range(lc.MAX_LAUNCH_PHASES):
        story.when(lambda w, n=n: lc.begin_phase(w, 1, 1, story.now, f"step-{n}"))
    story.refused(lambda w: lc.begin_phase(w, 1, 1, story.now, "one-more"), "too_many_phases")
    phases = story.state.current.segments[-1].phases  # type: ignore[union-attr]
    assert len(phases) == lc.MAX_LAUNCH_PHASES
    # The end of a phase whose beginning was refused is refused too: nothing to close.
    story.refused(lambda w: lc.end_phase(w, 1, 1, story.now, "one-more", "ok"), "phase_not_begun")
    story.when(lambda w: lc.end_phase(w, 1, 1, story.now, "step-0", "ok"))


def test_recovery_metadata_is_bounded() -> None:
    story = story_with_input()
    started(story)
    story.when(lambda w: lc.persist_recovery(w, 1, 1, story.now, {"pid": 42}))
    assert story.state.current.recovery_metadata == {"pid": 42}  # type: ignore[union-attr]
    story.refused(
        lambda w: lc.persist_recovery(w, 1, 1, story.now, {"x": "y" * 20000}), "metadata_too_large"
    )


# -- outcomes ----------------------------------------------------------------------------


def test_completed_result_keeps_data_usage_and_closes_the_segment() -> None:
    story = story_with_input()
    started(story)
    story.at(5)
    emits = story.when(
        lambda w: lc.finish(w, 1, 1, story.now, Result(data={"ok": 1}, usage={"usd": 0.5}))
    )
    assert events(emits) == [
        AttemptCompleted(work_id="w", attempt=1, epoch=1, data={"ok": 1}, usage={"usd": 0.5})
    ]
    attempt = story.state.current
    assert attempt is not None
    assert (attempt.status, attempt.outcome, attempt.stop_confirmed) == ("ended", "completed", True)
    assert attempt.segments[-1].ended_at == T0 + timedelta(seconds=5)
    assert story.state.state == "completed"


def test_failure_keeps_only_the_operation_code_and_message_and_arms_a_retry() -> None:
    story = story_with_input()
    started(story)
    result = Result(outcome="failed", error_code="quota", error_message="quota reached")
    emits = story.when(lambda w: lc.finish(w, 1, 1, story.now, result))
    failed, armed = events(emits)
    assert (failed.error_code, failed.error_message) == ("quota", "quota reached")  # type: ignore[attr-defined]
    assert armed == RetryArmed(
        work_id="w", generation=1, attempt=1, due_at=T0 + timedelta(minutes=5), ancestry=[2]
    )
    assert story.state.state == "retry_wait"
    assert story.state.pending[0].position == 2  # the input is presented again


def test_handoff_of_run_once_work_settles_as_completed() -> None:
    story = story_with_input()
    started(story)
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result(outcome="handoff")))
    assert story.state.state == "completed"
    assert story.state.current.outcome == "handoff"  # type: ignore[union-attr]


def test_standing_work_returns_to_idle_then_ready() -> None:
    story = story_with_input(kind="standing")
    started(story)
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result()))
    assert story.state.state == "idle"
    story.given(lc.accept_input(story.work, work_id="w", payload="next", key="n"))
    assert story.state.state == "ready"
    assert started(story).attempt == 2


def test_park_stores_the_remaining_budget_and_resume_keeps_it() -> None:
    story = story_with_input()
    started(story, timeout=600.0, lease=1000.0)
    story.at(100)
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result(outcome="waiting")))
    work = story.state
    assert work.state == "waiting"
    attempt = work.current
    assert attempt is not None and attempt.remaining_seconds == 500.0
    ended = sum(s.active_seconds() for s in attempt.segments)
    assert ended + attempt.remaining_seconds == 600.0
    story.at(1000)
    story.given(lc.accept_input(story.work, work_id="w", payload="wake", key="wake"))
    (emit,) = story.when(lambda w: lc.claim(w, now=story.now, owner="h2", pinned=pinned()))
    resumed = emit.event
    assert isinstance(resumed, AttemptResumed)
    assert (resumed.attempt, resumed.epoch, resumed.wake) == (1, 2, 5)
    assert resumed.deadline == story.now + timedelta(seconds=500)
    segments = story.state.current.segments  # type: ignore[union-attr]
    assert [(s.kind, s.epoch) for s in segments] == [("start", 1), ("resume", 2)]
    story.refused(lambda w: lc.renew(w, 1, 1, story.now), "lease_lost")


def test_segments_are_capped_with_dropped_count_and_time() -> None:
    story = story_with_input()
    started(story, max_segments=3)
    for i in range(1, 5):
        story.at(i * 100 - 50)
        story.when(lambda w: lc.finish(w, 1, w.current.epoch, story.now, Result(outcome="waiting")))  # type: ignore[union-attr]
        story.at(i * 100)
        story.given(lc.accept_input(story.work, work_id="w", payload=i, key=f"wake{i}"))
        story.when(lambda w: lc.claim(w, now=story.now, owner="h", pinned=pinned()))
    attempt = story.state.current
    assert attempt is not None
    assert len(attempt.segments) == 3
    assert attempt.dropped_segments == 2
    assert attempt.dropped_active_seconds == 50.0 + 50.0


def test_timeout_needs_a_due_deadline_and_a_current_lease() -> None:
    story = story_with_input()
    started(story, timeout=30.0)
    story.at(29)
    story.refused(lambda w: lc.time_out(w, 1, 1, story.now), "not_due")
    story.at(30)
    story.when(lambda w: lc.time_out(w, 1, 1, story.now))
    attempt = story.state.current
    assert attempt is not None
    assert (attempt.outcome, attempt.stop_confirmed, attempt.holds_slot) == (
        "timed_out",
        False,
        True,
    )
    assert story.state.state == "retry_wait"

    late = story_with_input()
    started(late, timeout=120.0)
    late.at(120)
    late.refused(lambda w: lc.time_out(w, 1, 1, late.now), "lease_lost")


def test_replacement_waits_for_confirmed_stop() -> None:
    story = story_with_input()
    started(story, timeout=30.0, retry=RetryPolicy(max_attempts=3, delays=(0.0, 0.0)))
    story.at(30)
    story.when(lambda w: lc.time_out(w, 1, 1, story.now))
    story.when(lambda w: lc.fire_retry(w, story.now))
    assert not story.state.startable
    story.refused(lambda w: lc.confirm_stopped(w, 1, 2), "lease_lost")
    story.when(lambda w: lc.confirm_stopped(w, 1, 1))
    assert lc.confirm_stopped(story.state, 1, 1) == []
    assert story.state.startable


# -- turns -------------------------------------------------------------------------------


def test_a_declared_turn_is_published_per_key_with_its_delivery_identity() -> None:
    story = Story().given(submitted())
    story.given(
        lc.accept_input(story.work, work_id="w", payload=1, key="k", correlation_key="issue-9")
    )
    started(story)
    data = {"core.turn.v1": {"status": "review", "comment": "please look"}}
    emits = story.when(lambda w: lc.finish(w, 1, 1, story.now, Result(data=data)))
    turn = emits[-1]
    assert turn.stream == "turns/w"
    assert turn.delivery_id == "turn/w/1/1/issue-9"
    assert turn.event == TurnPublished(
        work="w", execution="w/1", epoch=1, status="review", comment="please look", key="issue-9"
    )
    assert story.state.pending == ()  # never input to the Work that published it


def test_keyless_work_publishes_one_turn_without_key() -> None:
    story = story_with_input()
    started(story)
    emits = story.when(
        lambda w: lc.finish(w, 1, 1, story.now, Result(data={"core.turn.v1": {"status": "done"}}))
    )
    assert emits[-1].delivery_id == "turn/w/1/1"


@pytest.mark.parametrize("status", ["Done", "1x", "", "x" * 65, "a b", "ok!"])
def test_invalid_turn_status_is_refused(status: str) -> None:
    story = story_with_input()
    started(story)
    story.refused(
        lambda w: lc.finish(w, 1, 1, story.now, Result(data={"core.turn.v1": {"status": status}})),
        "invalid_turn",
    )


@pytest.mark.parametrize(
    "usage",
    [
        {"turns": 1.0},
        {"attempts": 1.0},
        {"USD": 1.0},
        {"usd": -1.0},
        {"usd": float("nan")},
        {"usd": float("inf")},
        {"1usd": 1.0},
    ],
)
def test_invalid_usage_is_refused(usage: dict[str, float]) -> None:
    story = story_with_input()
    started(story)
    story.refused(lambda w: lc.finish(w, 1, 1, story.now, Result(usage=usage)), "invalid_usage")


def test_input_event_is_addressed_to_its_work() -> None:
    story = Story().given(submitted())
    emit = lc.accept_input(story.work, work_id="w", payload={"x": 1}, key="a")
    assert emit.event == InputAccepted(work_id="w", key="a", payload={"x": 1})
