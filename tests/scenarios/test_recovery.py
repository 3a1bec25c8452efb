"""Recovery: relaunch versus adoption from the evidence, timeouts, crash loops, lost attempts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain import lifecycle as lc
from rota.domain import recovery as rc
from rota.domain.emit import Emit, work_stream
from rota.domain.events import (
    AttemptLost,
    AttemptRecovered,
    AttemptRecoveryFailed,
    AttemptTimedOut,
    LeaseReleased,
    RetryArmed,
    WorkHeld,
)
from rota.domain.policy import RetryPolicy
from rota.domain.results import Result

from .harness import T0, Story, events, pinned
from .test_lifecycle import story_with_input


def launched(
    *, invoke: bool = True, isolated: bool = False, metadata: bool = False, **kw: str
) -> Story:
    story = story_with_input(**kw)
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pinned(timeout=600)))
    if invoke:
        story.when(lambda w: lc.invoke(w, 1, 1, story.now, isolated))
    if metadata:
        story.when(lambda w: lc.persist_recovery(w, 1, 1, story.now, {"pid": 7}))
    story.at(60)  # the lease expired exactly now
    return story


def recover(story: Story, limit: int = 5) -> list[Emit]:
    return story.when(
        lambda w: rc.recover(w, now=story.now, owner="host-b", crash_loop_limit=limit)
    )


def test_relaunch_of_a_launch_whose_executor_was_never_called() -> None:
    story = launched(invoke=False)
    (emit,) = recover(story)
    assert emit.event == AttemptRecovered(
        work_id="w",
        attempt=1,
        epoch=2,
        previous_epoch=1,
        owner="host-b",
        previous_owner="host-a",
        lease_expires_at=T0 + timedelta(seconds=120),
        mode="relaunch",
        reason="lease_expired",
    )
    attempt = story.state.current
    assert attempt is not None
    assert [(s.kind, s.epoch, s.invoke) for s in attempt.segments] == [
        ("start", 1, "pending"),
        ("relaunched", 2, "pending"),
    ]
    assert attempt.segments[0].ended_at == attempt.segments[1].started_at  # no gap
    assert attempt.status == "starting" and attempt.outcome is None
    assert story.state.retry.failures == 0 and story.state.retry.next_due is None
    story.refused(lambda w: lc.invoke(w, 1, 1, story.now, False), "lease_lost")
    story.when(lambda w: lc.invoke(w, 1, 2, story.now, False))


def test_relaunch_of_an_isolated_launch_that_pinned_nothing() -> None:
    (emit,) = recover(launched(isolated=True))
    assert emit.event.mode == "relaunch"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("case", "kw"),
    [
        ("lease lost after the pin", {"isolated": True, "metadata": True}),
        ("unisolated launch that recorded metadata", {"metadata": True}),
        ("executor started before recording anything", {}),
    ],
)
def test_negative_controls_are_adopted(case: str, kw: dict[str, bool]) -> None:
    story = launched(**kw)
    (emit,) = recover(story)
    assert emit.event.mode == "adopt", case  # type: ignore[attr-defined]
    attempt = story.state.current
    assert attempt is not None
    assert [(s.kind, s.invoke) for s in attempt.segments] == [
        ("start", "called"),
        ("recovered", None),
    ]
    assert attempt.status == "running" and story.state.retry.failures == 0


def test_a_segment_without_an_invoke_marker_is_adopted() -> None:
    story = launched(invoke=False)
    recover(story)  # relaunched: invoke pending again
    story.when(lambda w: lc.invoke(w, 1, 2, story.now, False))
    story.at(200)
    recover(story)  # adopted: a recovered segment has no invoke marker
    story.at(300)
    (emit,) = recover(story)
    assert emit.event.mode == "adopt"  # type: ignore[attr-defined]
    kinds = [s.kind for s in story.state.current.segments]  # type: ignore[union-attr]
    assert kinds == ["start", "relaunched", "recovered", "recovered"]


def test_a_released_lease_is_recovered_at_once() -> None:
    story = story_with_input()
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pinned()))
    story.when(lambda w: lc.invoke(w, 1, 1, story.now, False))
    story.when(lambda w: lc.release(w, 1, 1, story.now, "host_stopped"))
    (emit,) = recover(story)
    assert emit.event.reason == "released"  # type: ignore[attr-defined]


def test_nothing_to_recover_while_the_lease_is_current() -> None:
    story = story_with_input()
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pinned()))
    story.at(59.999)
    assert rc.recover(story.state, now=story.now, owner="b", crash_loop_limit=5) == []


def test_a_timeout_recovers_authority_first_and_never_relaunches() -> None:
    story = launched(invoke=False)
    story.at(601)
    recovered, timed_out, armed = recover(story)
    assert recovered.event.reason == "timeout" and recovered.event.mode == "adopt"  # type: ignore[attr-defined]
    assert timed_out.event == AttemptTimedOut(work_id="w", attempt=1, epoch=2)
    assert isinstance(armed.event, RetryArmed)
    attempt = story.state.current
    assert attempt is not None
    last = attempt.segments[-1]
    assert last.kind == "recovered" and last.started_at == last.ended_at  # zero length
    assert attempt.outcome == "timed_out" and attempt.holds_slot  # until the stop is confirmed


def test_crash_loop_ceiling_holds_the_work_instead_of_relaunching() -> None:
    story = launched(invoke=False)
    for n in range(3):
        (emit,) = recover(story, limit=3)
        assert emit.event.mode == "relaunch"  # type: ignore[attr-defined]
        story.at(60 + 60 * (n + 1))
    (held,) = recover(story, limit=3)
    assert isinstance(held.event, WorkHeld) and held.event.kind == "crash_loop"
    assert story.state.state == "held"
    assert recover(story, limit=3) == []
    story.when(lambda w: rc.release_hold(w, work_id="w", kind=None))
    (emit,) = recover(story, limit=3)
    assert emit.event.mode == "relaunch"  # type: ignore[attr-defined]


def test_a_gate_hold_cannot_be_released_by_an_operator() -> None:
    story = story_with_input()
    story.given(
        Emit(
            work_stream("w"), WorkHeld(work_id="w", kind="gate", reason="approval", holder="human")
        )
    )
    story.refused(lambda w: rc.release_hold(w, work_id="w", kind=None), "gate_hold")
    Story().refused(lambda w: rc.release_hold(w, work_id="nope", kind=None), "unknown_work")


def test_a_lost_attempt_without_declared_safety_fails_the_work() -> None:
    story = launched()
    recover(story)
    emits = story.when(lambda w: rc.lose(w, 1, 2, story.now, "not_running"))
    assert events(emits) == [
        LeaseReleased(work_id="w", attempt=1, epoch=2, reason="lease_expired"),
        AttemptLost(work_id="w", attempt=1, epoch=2, evidence="not_running"),
    ]
    assert story.state.state == "failed" and story.state.retry.blocked_reason == "lost"
    assert story.state.current.stop_confirmed  # type: ignore[union-attr]


@pytest.mark.parametrize("safety", ["idempotent", "deduplicated"])
def test_a_lost_attempt_of_safe_work_gets_a_fresh_attempt(safety: str) -> None:
    story = story_with_input(safety=safety)
    policy = RetryPolicy(retry_on_lost=True)
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pinned(retry=policy)))
    story.when(lambda w: lc.invoke(w, 1, 1, story.now, False))
    story.at(60)
    recover(story)
    emits = story.when(lambda w: rc.lose(w, 1, 2, story.now, "not_running"))
    (armed,) = [e for e in events(emits) if isinstance(e, RetryArmed)]
    assert story.state.state == "retry_wait"
    story.now = armed.due_at
    story.when(lambda w: lc.fire_retry(w, story.now))
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-c", pinned=pinned()))
    fresh = story.state.current
    assert fresh is not None
    assert (fresh.number, fresh.epoch, fresh.owner, fresh.recovery_metadata) == (
        2,
        1,
        "host-c",
        None,
    )
    assert [s.kind for s in fresh.segments] == ["start"]


def test_lost_attempts_of_safe_work_without_retry_on_lost_fail() -> None:
    story = launched(safety="idempotent")
    recover(story)
    story.when(lambda w: rc.lose(w, 1, 2, story.now, "not_running"))
    assert story.state.state == "failed"


def lost_again(story: Story, policy: RetryPolicy, number: int) -> list[Emit]:
    """Attempt `number` starts, its lease lapses, recovery adopts it and finds it gone."""
    pin = pinned(retry=policy)
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pin))
    story.when(lambda w: lc.invoke(w, number, 1, story.now, False))
    story.now += timedelta(seconds=60)
    recover(story)
    return story.when(lambda w: rc.lose(w, number, 2, story.now, "not_running"))


def test_a_lost_attempt_with_no_attempts_left_fails_the_work() -> None:
    story = story_with_input(safety="idempotent")
    policy = RetryPolicy(max_attempts=2, retry_on_lost=True)
    (armed,) = [e for e in events(lost_again(story, policy, 1)) if isinstance(e, RetryArmed)]
    story.now = armed.due_at
    story.when(lambda w: lc.fire_retry(w, story.now))
    emits = lost_again(story, policy, 2)  # the second and last attempt is lost too
    assert events(emits) == [
        LeaseReleased(work_id="w", attempt=2, epoch=2, reason="lease_expired"),
        AttemptLost(work_id="w", attempt=2, epoch=2, evidence="not_running"),
    ]  # no retry timer
    work = story.state
    assert (work.state, work.retry.failures, work.retry.blocked_reason) == ("failed", 2, "lost")
    assert work.retry.next_due is None and not work.startable
    assert work.terminal is None  # open to a manual retry, as any exhausted Work
    assert [p.key for p in work.pending] == ["k0"]  # the input is kept for that retry


def test_an_earlier_failure_counts_against_the_attempts_a_lost_one_may_use() -> None:
    story = story_with_input(safety="deduplicated")
    policy = RetryPolicy(max_attempts=2, delays=(0.0,), retry_on_lost=True)
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pinned(retry=policy)))
    story.when(lambda w: lc.finish(w, 1, 1, story.now, lc.Result(outcome="failed")))
    story.when(lambda w: lc.fire_retry(w, story.now))
    emits = lost_again(story, policy, 2)
    assert not [e for e in events(emits) if isinstance(e, RetryArmed)]
    assert (story.state.state, story.state.retry.blocked_reason) == ("failed", "lost")


def test_terminal_on_exhaustion_closes_work_whose_last_attempt_was_lost() -> None:
    story = story_with_input(safety="idempotent")
    policy = RetryPolicy(max_attempts=1, retry_on_lost=True, terminal_on_exhaustion=True)
    emits = lost_again(story, policy, 1)
    assert not [e for e in events(emits) if isinstance(e, RetryArmed)]
    assert (story.state.state, story.state.terminal) == ("failed", "failed")
    story.refused(lambda w: lc.accept_input(w, work_id="w", payload=1, key="late"), "work_terminal")


def test_a_stop_confirmation_cannot_target_an_attempt_adopted_since_at_another_epoch() -> None:
    story = launched()
    story.at(600)  # past the deadline: recovery adopts at epoch 2 and times the attempt out
    recover(story)
    attempt = story.state.current
    assert attempt is not None and (attempt.epoch, attempt.outcome) == (2, "timed_out")
    assert attempt.holds_slot
    story.refused(lambda w: lc.confirm_stopped(w, 1, 1), "lease_lost")
    story.when(lambda w: lc.confirm_stopped(w, 1, 2))
    assert not story.state.current.holds_slot  # type: ignore[union-attr]


def test_adoptable_tells_a_host_whether_recovery_owns_the_attempt() -> None:
    story = launched()
    assert rc.adoptable(story.state, 1, 1)
    recover(story)
    assert rc.adoptable(story.state, 1, 1) and rc.adoptable(story.state, 1, 2)
    story.when(lambda w: lc.finish(w, 1, 2, story.now, lc.Result()))
    assert not rc.adoptable(story.state, 1, 2)
    assert not rc.adoptable(None, 1, 1)


def test_pages_fetch_one_more_to_know_there_is_more() -> None:
    works = [launched().state for _ in range(5)]
    now = T0 + timedelta(seconds=60)
    first, more = rc.page(works, now, 4)
    assert len(first) == 4 and more
    _, more = rc.page(works, now, 5)
    assert not more
    for bad in (0, 65):
        with pytest.raises(lc.Refusal):
            rc.page(works, now, bad)


def test_evidence_comes_from_the_owner_that_started_the_work_not_the_last_recoverer() -> None:
    story = launched()  # host-a called the executor
    recover(story)  # host-b recovers, finds no evidence
    story.at(200)
    story.when(lambda w: rc.recover(w, now=story.now, owner="host-c", crash_loop_limit=5))
    attempt = story.state.current
    assert attempt is not None
    assert attempt.owner == "host-c"
    assert attempt.launch_owner == "host-a"
    story.when(lambda w: rc.adopted(w, 1, 3, story.now))
    assert story.state.current.launch_owner == "host-c"  # type: ignore[union-attr]


# -- failed recoveries: stop and confirm, and the ceiling --------------------------------


def failed_recovery(story: Story, policy: RetryPolicy, number: int, limit: int) -> list[Emit]:
    """Attempt `number` starts, its lease lapses, recovery claims it and its executor
    finds no evidence of it."""
    pin = pinned(retry=policy)
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pin))
    story.when(lambda w: lc.invoke(w, number, 1, story.now, False))
    story.now += timedelta(seconds=60)
    recover(story)
    return story.when(
        lambda w: rc.recovery_failed(w, number, 2, story.now, evidence="unknown", limit=limit)
    )


def next_attempt(story: Story, emits: list[Emit], number: int) -> None:
    """The failed attempt's stop is confirmed and its retry timer fires."""
    if not story.state.current.stop_confirmed:  # type: ignore[union-attr]
        story.when(lambda w: lc.confirm_stopped(w, number, 2))
    (armed,) = [e for e in events(emits) if isinstance(e, RetryArmed)]
    story.now = armed.due_at
    story.when(lambda w: lc.fire_retry(w, story.now))


def test_a_failed_recovery_ends_the_attempt_keeping_its_slot_and_arms_its_retry() -> None:
    story = story_with_input()
    emits = failed_recovery(story, RetryPolicy(), 1, limit=3)
    kinds = [type(e).__name__ for e in events(emits)]
    assert kinds == ["AttemptRecoveryFailed", "AttemptFailed", "RetryArmed"]
    noted = events(emits)[0]
    assert noted == AttemptRecoveryFailed(
        work_id="w", attempt=1, epoch=2, evidence="unknown", failures=1, limit=3
    )
    work = story.state
    attempt = work.current
    assert attempt is not None
    assert (attempt.status, attempt.outcome, attempt.error_code) == (
        "ended",
        "failed",
        "recovery_failed",
    )
    assert attempt.holds_slot and not attempt.stop_confirmed  # until the stop is verified
    assert work.state == "retry_wait" and rc.failed_recoveries(work) == 1
    assert recover(story) == []  # never claimed again at a higher epoch
    # Its fence: a stale epoch cannot fail it.
    story.refused(
        lambda w: rc.recovery_failed(w, 1, 2, story.now, evidence="unknown", limit=3),
        "lease_lost",
    )


def test_the_ceiling_of_failed_recoveries_holds_the_work_until_released() -> None:
    story = story_with_input()
    policy = RetryPolicy(max_attempts=10, delays=(1.0,) * 9)
    for number in (1, 2):
        emits = failed_recovery(story, policy, number, limit=3)
        assert not any(isinstance(e, WorkHeld) for e in events(emits))
        next_attempt(story, emits, number)
    emits = failed_recovery(story, policy, 3, limit=3)
    (held,) = [e for e in events(emits) if isinstance(e, WorkHeld)]
    assert held.kind == "recovery_exhausted"
    assert "w/3: recovery failed 3 times in a row" in held.reason
    next_attempt(story, emits, 3)
    work = story.state
    assert work.state == "held" and not work.startable
    # The operator releases it: the Work may start again; the row goes on, so the next
    # failed recovery in it holds the Work again at once.
    story.when(lambda w: rc.release_hold(w, work_id="w", kind=None))
    assert story.state.startable
    emits = failed_recovery(story, policy, 4, limit=3)
    assert [e.failures for e in events(emits) if isinstance(e, AttemptRecoveryFailed)] == [4]
    assert any(isinstance(e, WorkHeld) for e in events(emits))


def test_a_success_ends_a_row_of_failed_recoveries() -> None:
    story = story_with_input()
    policy = RetryPolicy(max_attempts=10, delays=(1.0,) * 9)
    emits = failed_recovery(story, policy, 1, limit=2)
    next_attempt(story, emits, 1)
    story.when(lambda w: lc.claim(w, now=story.now, owner="host-a", pinned=pinned(retry=policy)))
    story.when(lambda w: lc.invoke(w, 2, 1, story.now, False))
    story.now += timedelta(seconds=60)
    recover(story)
    story.when(lambda w: rc.adopted(w, 2, 2, story.now))  # this recovery found its attempt
    failed = Result(outcome="failed", error_code="boom")
    next_attempt(story, story.when(lambda w: lc.finish(w, 2, 2, story.now, failed)), 2)
    # A later failed recovery is the first of a new row, under the limit of two: not held.
    emits = failed_recovery(story, policy, 3, limit=2)
    assert not any(isinstance(e, WorkHeld) for e in events(emits))
    assert [e.failures for e in events(emits) if isinstance(e, AttemptRecoveryFailed)] == [1]


def test_no_hold_when_the_failure_already_ends_the_work() -> None:
    story = story_with_input()
    policy = RetryPolicy(max_attempts=1, terminal_on_exhaustion=True)
    emits = failed_recovery(story, policy, 1, limit=1)
    assert not any(isinstance(e, WorkHeld) for e in events(emits))
    assert story.state.state == "failed"
