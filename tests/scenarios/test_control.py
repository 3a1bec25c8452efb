"""Control dispatch: inject and interrupt as durable intents, and cancellation."""

from __future__ import annotations

from rota.domain import control as ct
from rota.domain import lifecycle as lc
from rota.domain import recovery as rc
from rota.domain.events import ControlRequested
from rota.domain.policy import Binding, Pinned, Registration
from rota.domain.results import Result

from .harness import T0, Story
from .test_lifecycle import story_with_input

CAPABLE = Pinned(
    generation="g",
    binding=Binding(name="b", executor="x"),
    registration=Registration(name="x", capabilities=("inject", "interrupt", "stop")),
    timeout_seconds=3600,
    lease_seconds=60,
)


def running(invoked: bool = True) -> Story:
    story = story_with_input()
    story.when(lambda w: lc.claim(w, now=story.now, owner="h", pinned=CAPABLE))
    if invoked:
        story.when(lambda w: lc.invoke(w, 1, 1, story.now, False))
    return story


def inject(story: Story, payload: object = "more") -> str:
    emits = story.when(lambda w: ct.request_inject(w, work_id="w", payload=payload, key="k9"))
    requested = emits[-1].event
    assert isinstance(requested, ControlRequested)
    return requested.intent


def dispatch(story: Story, intent: str) -> str:
    (emit,) = story.when(lambda w: ct.dispatch(w, intent))
    return emit.event.token  # type: ignore[attr-defined]


def control(story: Story, intent: str) -> str:
    return next(c for c in story.state.controls if c.intent == intent).state


def test_inject_acknowledged_means_accepted_not_consumed() -> None:
    story = running()
    intent = inject(story)
    assert control(story, intent) == "pending"
    token = dispatch(story, intent)
    story.when(lambda w: ct.acknowledge(w, intent, token))
    assert control(story, intent) == "accepted"
    assert [p.key for p in story.state.pending] == ["k9"]  # still eligible
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result()))
    assert story.state.state == "ready"  # completed cannot overtake the accepted input
    assert control(story, intent) == "accepted"


def test_a_result_consuming_the_input_settles_consumed_even_with_the_ack_in_flight() -> None:
    story = running()
    intent = inject(story)
    token = dispatch(story, intent)
    position = next(c for c in story.state.controls).input_position
    assert position is not None
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result(consumed=[position])))
    assert control(story, intent) == "consumed"
    assert story.state.state == "completed"
    story.refused(lambda w: ct.acknowledge(w, intent, token), "stale_token")  # late ack


def test_inject_racing_completion_leaves_the_input_for_the_next_attempt() -> None:
    story = running()
    intent = inject(story)
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result()))
    assert control(story, intent) == "superseded"
    story.refused(lambda w: ct.dispatch(w, intent), "not_dispatchable")
    story.when(lambda w: lc.claim(w, now=story.now, owner="h", pinned=CAPABLE))
    assert [p.key for p in story.state.current.consumed] == ["k9"]  # type: ignore[union-attr]


def test_not_accepting_keeps_the_input_and_is_not_retried() -> None:
    story = running()
    intent = inject(story)
    token = dispatch(story, intent)
    story.when(lambda w: ct.settle(w, intent, token, "not_accepting"))
    assert control(story, intent) == "not_accepting"
    assert [p.key for p in story.state.pending] == ["k9"]
    story.refused(lambda w: ct.dispatch(w, intent), "not_dispatchable")


def test_a_definite_failure_applies_the_pinned_fallback() -> None:
    story = running()
    intent = inject(story)
    token = dispatch(story, intent)
    story.when(lambda w: ct.settle(w, intent, token, "failed"))
    assert control(story, intent) == "queued"
    assert [p.key for p in story.state.pending] == ["k9"]


def test_an_ambiguous_delivery_retries_the_same_intent_with_a_new_token() -> None:
    story = running()
    intent = inject(story)
    first = dispatch(story, intent)
    story.when(lambda w: ct.settle(w, intent, first, "ambiguous"))
    second = dispatch(story, intent)
    assert (first, second) == (f"{intent}#1", f"{intent}#2")
    story.refused(lambda w: ct.acknowledge(w, intent, first), "stale_token")
    story.when(lambda w: ct.acknowledge(w, intent, second))
    assert control(story, intent) == "accepted"


def test_an_intent_waits_undispatched_while_the_attempt_is_launching() -> None:
    story = running(invoked=False)
    intent = inject(story)
    story.refused(lambda w: ct.dispatch(w, intent), "not_dispatchable")
    story.when(lambda w: lc.invoke(w, 1, 1, story.now, False))
    dispatch(story, intent)


def test_a_late_acknowledgement_after_a_new_epoch_cannot_retarget() -> None:
    story = running()
    intent = inject(story)
    token = dispatch(story, intent)
    story.at(60)
    story.when(lambda w: rc.recover(w, now=story.now, owner="h2", crash_loop_limit=5))
    assert control(story, intent) == "pending"  # the old dispatch is void
    story.refused(lambda w: ct.acknowledge(w, intent, token), "stale_token")
    story.refused(lambda w: ct.dispatch(w, intent), "not_dispatchable")  # being recovered
    story.when(lambda w: rc.adopted(w, 1, 2, story.now))
    new = dispatch(story, intent)
    assert new.endswith("#2")


def test_a_newer_registration_never_grants_capability_to_an_older_attempt() -> None:
    story = story_with_input()
    from .harness import pinned

    story.when(lambda w: lc.claim(w, now=T0, owner="h", pinned=pinned()))  # no capabilities
    story.refused(lambda w: ct.request_inject(w, work_id="w", payload=1), "unsupported_control")
    story.refused(lambda w: ct.request_interrupt(w, work_id="w"), "unsupported_control")


def test_interrupt_fences_first_and_keeps_the_resource_hold() -> None:
    story = running()
    story.when(lambda w: ct.request_interrupt(w, work_id="w"))
    attempt = story.state.current
    assert attempt is not None
    assert (attempt.outcome, attempt.holds_slot) == ("interrupted", True)
    assert [p.key for p in story.state.pending] == ["k0"]  # the Work is ready again
    story.refused(lambda w: lc.finish(w, 1, 1, story.now, Result()), "lease_lost")
    (intent,) = [c.intent for c in story.state.controls]
    token = dispatch(story, intent)
    story.when(lambda w: ct.acknowledge(w, intent, token))
    assert control(story, intent) == "delivered"
    assert not story.state.startable  # until the stop is verified
    story.when(lambda w: lc.confirm_stopped(w, 1, 1))
    assert story.state.startable


def test_interrupt_racing_recovery_leaves_nothing_to_recover() -> None:
    story = running()
    story.at(60)
    story.when(lambda w: ct.request_interrupt(w, work_id="w"))
    assert rc.recover(story.state, now=story.now, owner="h2", crash_loop_limit=5) == []


def test_cancel_fences_attempt_timers_and_input_at_once() -> None:
    story = running()
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result(outcome="failed")))
    assert story.state.state == "retry_wait"
    from rota.domain import gates

    story.when(lambda w: gates.cancel(w, work_id="w", reason="obsolete"))
    assert story.state.state == "cancelled"
    assert story.state.retry.next_due is None and story.state.pending == ()
    story.refused(lambda w: lc.fire_retry(w, story.now), "no_timer")
    story.refused(lambda w: lc.accept_input(w, work_id="w", payload=1), "work_terminal")
    story.refused(lambda w: gates.cancel(w, work_id="w"), "work_terminal")


def test_cancelling_a_running_attempt_keeps_its_slot_until_the_stop_is_verified() -> None:
    story = running()
    intent = inject(story)
    from rota.domain import gates

    story.when(lambda w: gates.cancel(w, work_id="w"))
    attempt = story.state.current
    assert attempt is not None
    assert (attempt.outcome, attempt.holds_slot) == ("cancelled", True)
    assert control(story, intent) == "superseded"
    story.refused(lambda w: lc.renew(w, 1, 1, story.now), "lease_lost")
