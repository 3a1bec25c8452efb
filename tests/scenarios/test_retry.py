"""Retry as durable timers: delays, failure budget, hints, permanent failure, standing Work."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain import lifecycle as lc
from rota.domain.errors import InvalidCommand
from rota.domain.events import RetryArmed, RetryFired
from rota.domain.policy import RetryPolicy
from rota.domain.results import Result

from .harness import Story, events, pinned
from .test_lifecycle import story_with_input


def fail(story: Story, **result: object) -> list[object]:
    attempt = story.state.current
    assert attempt is not None
    outcome = Result(outcome="failed", **result)  # type: ignore[arg-type]
    return events(
        story.when(lambda w: lc.finish(w, attempt.number, attempt.epoch, story.now, outcome))
    )


def start(story: Story, retry: RetryPolicy | None = None) -> None:
    story.when(
        lambda w: lc.claim(w, now=story.now, owner="h", pinned=pinned(retry=retry, lease=1e9))
    )


def fire(story: Story) -> RetryFired:
    (emit,) = story.when(lambda w: lc.fire_retry(w, story.now))
    assert isinstance(emit.event, RetryFired)
    return emit.event


def run_failures(story: Story, count: int, retry: RetryPolicy | None = None) -> list[RetryArmed]:
    armed = []
    for _ in range(count):
        start(story, retry)
        for event in fail(story):
            if isinstance(event, RetryArmed):
                armed.append(event)
                story.now = event.due_at
                fire(story)
    return armed


def test_default_delays_are_five_then_ten_minutes_for_three_attempts() -> None:
    story = story_with_input()
    t = story.now
    armed = run_failures(story, 3)
    assert [a.due_at - t for a in armed] == [timedelta(minutes=5), timedelta(minutes=15)]
    assert [a.generation for a in armed] == [1, 2]
    assert story.state.state == "failed"
    assert story.state.retry.blocked_reason == "exhausted"
    assert [a.number for a in story.state.attempts] == [1, 2, 3]


def test_an_explicit_four_attempt_policy_adds_fifteen_minutes() -> None:
    policy = RetryPolicy(max_attempts=4)
    assert policy.effective_delays() == (300.0, 600.0, 900.0)
    armed = run_failures(story_with_input(), 4, policy)
    assert len(armed) == 3


def test_up_to_one_hundred_delays_and_not_one_more() -> None:
    policy = RetryPolicy(max_attempts=101, delays=tuple(float(i) for i in range(100)))
    policy.validate()
    assert policy.delay_after(100) == 99.0 and policy.delay_after(101) is None
    with pytest.raises(InvalidCommand, match=r"retry\.delays has 101 entries"):
        RetryPolicy(max_attempts=102, delays=tuple(1.0 for _ in range(101))).validate()


def test_failure_count_is_kept_apart_from_attempt_numbers() -> None:
    story = story_with_input(kind="standing")
    start(story)
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result()))
    story.given(lc.accept_input(story.work, work_id="w", payload=2, key="2"))
    start(story)
    fail(story)
    assert story.state.retry.failures == 1 and story.state.current.number == 2  # type: ignore[union-attr]


def test_permanent_failure_arms_no_retry_and_exhausts_at_once() -> None:
    story = story_with_input()
    start(story)
    emitted = fail(story, error_code="invalid_config", permanent=True)
    assert not any(isinstance(e, RetryArmed) for e in emitted)
    assert story.state.state == "failed"
    assert story.state.retry.blocked_reason == "permanent_failure"
    assert story.state.retry.failures == 3


def test_negative_control_an_unmarked_failure_arms_its_first_delay() -> None:
    story = story_with_input()
    start(story)
    emitted = fail(story, error_code="invalid_config")
    (armed,) = [e for e in emitted if isinstance(e, RetryArmed)]
    assert armed.generation == 1 and armed.due_at == story.now + timedelta(minutes=5)


def test_terminal_on_exhaustion_fails_the_work_at_its_first_permanent_failure() -> None:
    story = story_with_input()
    start(story, RetryPolicy(terminal_on_exhaustion=True))
    fail(story, permanent=True)
    assert story.state.terminal == "failed"


def test_hint_with_reset_time_waits_until_reset_plus_two_minutes() -> None:
    story = story_with_input()
    start(story)
    reset = story.now + timedelta(hours=1)
    (armed,) = [e for e in fail(story, retry_at=reset) if isinstance(e, RetryArmed)]
    assert armed.due_at == reset + timedelta(minutes=2) and armed.hinted
    assert story.state.retry.failures == 1  # hinted failures still consume the budget


def test_unknown_reset_hint_waits_thirty_minutes() -> None:
    story = story_with_input()
    start(story)
    (armed,) = [e for e in fail(story, retry_unknown=True) if isinstance(e, RetryArmed)]
    assert armed.due_at == story.now + timedelta(minutes=30)


@pytest.mark.parametrize(
    ("offset", "why"),
    [
        (timedelta(0), "not in the future"),
        (-timedelta(seconds=1), "not in the future"),
        (timedelta(days=8), "more than 7 days"),
    ],
)
def test_invalid_hints_fail_explicitly(offset: timedelta, why: str) -> None:
    story = story_with_input()
    start(story)
    emitted = fail(story, retry_at=story.now + offset)
    failed = emitted[0]
    assert failed.error_code == "invalid_retry_hint" and why in failed.error_message  # type: ignore[attr-defined]
    (armed,) = [e for e in emitted if isinstance(e, RetryArmed)]
    assert not armed.hinted and armed.due_at == story.now + timedelta(minutes=5)


def test_standing_work_hinted_failure_arms_and_blocks_without_exhausting() -> None:
    story = story_with_input(kind="standing")
    for _ in range(5):
        start(story)
        (armed,) = [e for e in fail(story, retry_unknown=True) if isinstance(e, RetryArmed)]
        assert story.state.state == "retry_wait"
        story.given(lc.accept_input(story.work, work_id="w", payload=1, key=f"q{story.position}"))
        assert not story.state.startable  # queued input during backoff does not clear it
        story.now = armed.due_at
        fire(story)
    assert story.state.retry.blocked_reason is None
    assert story.state.state == "ready"


def test_standing_work_hintless_failure_arms_nothing() -> None:
    story = story_with_input(kind="standing")
    start(story)
    assert not any(isinstance(e, RetryArmed) for e in fail(story))
    assert story.state.state == "idle"


def test_a_timer_fires_once_and_not_before_it_is_due() -> None:
    story = story_with_input()
    start(story)
    (armed,) = [e for e in fail(story) if isinstance(e, RetryArmed)]
    story.now = armed.due_at - timedelta(microseconds=1)
    story.refused(lambda w: lc.fire_retry(w, story.now), "not_due")
    story.now = armed.due_at
    (emit,) = story.when(lambda w: lc.fire_retry(w, story.now))
    assert emit.delivery_id == "retry/w/1"
    story.refused(lambda w: lc.fire_retry(w, story.now), "no_timer")
    assert story.state.state == "ready"
