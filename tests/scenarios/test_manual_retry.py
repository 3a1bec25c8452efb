"""Manual retry: `core.manual.retry` and its alias `core.retry.requested`."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain import lifecycle as lc
from rota.domain.events import ManualRetry, RetryArmed, RetryRequested
from rota.domain.policy import RetryPolicy

from .harness import Story
from .test_lifecycle import story_with_input
from .test_retry import fail, fire, start


def exhausted(policy: RetryPolicy | None = None) -> Story:
    story = story_with_input()
    for _ in range(3):
        start(story, policy)
        for event in fail(story):
            if isinstance(event, RetryArmed):
                story.now = event.due_at
                fire(story)
    assert story.state.state == "failed"
    return story


@pytest.mark.parametrize("alias", ["core.manual.retry", "core.retry.requested"])
def test_manual_retry_resets_the_budget_not_the_attempt_numbers(alias: str) -> None:
    story = exhausted()
    failed_at = story.state.retry.failed_at
    (emit,) = story.when(lambda w: lc.request_retry(w, work_id="w", alias=alias, reason="fixed"))
    assert isinstance(emit.event, ManualRetry if alias == "core.manual.retry" else RetryRequested)
    assert emit.delivery_id == f"retry-request/w/{failed_at}"
    assert story.state.state == "ready"
    assert story.state.retry.failures == 0 and story.state.retry.blocked_reason is None
    start(story)
    assert story.state.current.number == 4  # type: ignore[union-attr]
    (armed,) = [e for e in fail(story) if isinstance(e, RetryArmed)]
    assert armed.generation == 3  # timer identities never repeat after a reset
    assert armed.due_at == story.now + timedelta(minutes=5)


def test_manual_retry_clears_permanent_failure() -> None:
    story = story_with_input()
    start(story)
    fail(story, permanent=True)
    assert story.state.retry.blocked_reason == "permanent_failure"
    story.when(lambda w: lc.request_retry(w, work_id="w"))
    assert story.state.state == "ready"


def test_manual_retry_is_refused_while_an_attempt_or_wait_is_live() -> None:
    story = story_with_input()
    start(story)
    story.refused(lambda w: lc.request_retry(w, work_id="w"), "retry_live")


def test_manual_retry_of_terminal_work_is_refused() -> None:
    story = exhausted(RetryPolicy(terminal_on_exhaustion=True))
    story.refused(lambda w: lc.request_retry(w, work_id="w"), "work_terminal")


def test_nothing_to_retry_is_refused() -> None:
    story = story_with_input()
    story.refused(lambda w: lc.request_retry(w, work_id="w"), "nothing_to_retry")
    Story().refused(lambda w: lc.request_retry(w, work_id="w"), "unknown_work")


def test_a_request_never_clears_a_later_failure() -> None:
    story = story_with_input()
    start(story)
    fail(story)
    stale = lc.request_retry(story.work, work_id="w")
    story.when(lambda w: lc.request_retry(w, work_id="w"))
    start(story)
    fail(story)
    later = story.state.retry
    story.given(stale)  # a processed request replayed after a later failure
    assert story.state.retry == later


def test_manual_retry_during_backoff_disarms_the_timer() -> None:
    story = story_with_input()
    start(story)
    fail(story)
    assert story.state.state == "retry_wait"
    story.when(lambda w: lc.request_retry(w, work_id="w"))
    assert story.state.state == "ready" and story.state.retry.next_due is None
    story.refused(lambda w: lc.fire_retry(w, story.now), "no_timer")
