"""Handoff continuation (seed 001, "Outcomes, handoff and retry"): off by default; with
`handoff = "continue"` a stable derived `core.execution.handoff` event and the queue
checkpoint (the continuation input) join the outcome's append; a causal refusal records
`core.execution.handoff_refused` and keeps the handoff outcome."""

from __future__ import annotations

from msgspec.structs import replace

from rota.domain import lifecycle as lc
from rota.domain.events import (
    AttemptClaimed,
    AttemptHandedOff,
    HandoffContinued,
    HandoffRefused,
    InputAccepted,
)
from rota.domain.policy import Pinned
from rota.domain.results import Result

from .harness import Story, events, pinned


def continuing(handoff: str = "continue") -> Pinned:
    base = pinned()
    return replace(base, binding=replace(base.binding, handoff=handoff))


def standing(kind: str = "standing") -> Story:
    story = Story().given(
        lc.submit(None, lc.SubmitWork(work_id="w", scope="root", binding="b", kind=kind))
    )
    return story.given(lc.accept_input(story.work, work_id="w", payload={"step": 0}, key="k0"))


def start(story: Story, pin: Pinned) -> AttemptClaimed:
    (emit,) = story.when(lambda w: lc.claim(w, now=story.now, owner="h1", pinned=pin))
    assert isinstance(emit.event, AttemptClaimed)
    return emit.event


def hand_off(story: Story, claimed: AttemptClaimed, data: object) -> list[object]:
    result = Result(outcome="handoff", data=data)
    return events(
        story.when(lambda w: lc.finish(w, claimed.attempt, claimed.epoch, story.now, result))
    )


def test_a_continued_handoff_queues_its_own_next_input_in_the_outcomes_append() -> None:
    story = standing()
    claimed = start(story, continuing())
    outcome, continued, queued = hand_off(story, claimed, {"step": 1})
    assert isinstance(outcome, AttemptHandedOff)
    assert continued == HandoffContinued(
        work_id="w", attempt=1, epoch=1, checkpoint=2, continuation=1
    )
    assert isinstance(queued, InputAccepted)
    assert (queued.key, queued.payload) == ("handoff:1:1", {"step": 1})
    delivery = {e.delivery_id for _, e in story.log[-3:]}
    assert delivery == {None, "handoff/w/1/1", "input/w/handoff:1:1"}
    # The Work is ready with the continuation as its input: attempt 2 continues from it.
    assert [p.payload for p in story.state.pending] == [{"step": 1}]
    second = start(story, continuing())
    assert second.attempt == 2
    assert story.state.current.trigger.key == "handoff:1:1"  # type: ignore[union-attr]
    _, again, _ = hand_off(story, second, {"step": 2})
    assert isinstance(again, HandoffContinued) and again.continuation == 2


def test_continuation_is_off_by_default() -> None:
    story = standing()
    claimed = start(story, continuing("stop"))
    (outcome,) = hand_off(story, claimed, {"step": 1})
    assert isinstance(outcome, AttemptHandedOff)
    assert story.state.pending == ()


def test_a_run_once_works_handoff_settles_it_and_the_continuation_is_refused() -> None:
    story = standing(kind="run-once")
    claimed = start(story, continuing())
    outcome, refused = hand_off(story, claimed, {"step": 1})
    assert isinstance(outcome, AttemptHandedOff)  # the handoff outcome is kept
    assert isinstance(refused, HandoffRefused) and refused.reason == "run_once"
    assert story.state.terminal == "completed" and story.state.pending == ()


def test_continuations_stop_at_the_limit_with_a_diagnostic() -> None:
    story = standing()
    for n in range(1, lc.MAX_CONTINUATIONS + 1):
        claimed = start(story, continuing())
        _, continued, _ = hand_off(story, claimed, {"step": n})
        assert isinstance(continued, HandoffContinued) and continued.continuation == n
    claimed = start(story, continuing())
    outcome, refused = hand_off(story, claimed, {"step": "one too many"})
    assert isinstance(outcome, AttemptHandedOff)
    assert isinstance(refused, HandoffRefused) and refused.reason == "continuation_limit"
    assert story.state.pending == ()
    # Outside input starts a new chain.
    story.given(lc.accept_input(story.work, work_id="w", payload={"from": "outside"}, key="k1"))
    claimed = start(story, continuing())
    _, continued, _ = hand_off(story, claimed, {"step": "again"})
    assert isinstance(continued, HandoffContinued) and continued.continuation == 1
