"""Scenarios of wait predicates (seed 001): only matching input resumes a parked attempt,
other input queues and is judged again by a later wait, and the wake starts the segment."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from rota.domain import lifecycle as lc
from rota.domain import waits
from rota.domain.errors import InvalidCommand
from rota.domain.events import AttemptParked, AttemptResumed, WaitJudged
from rota.domain.evolve import evolve
from rota.domain.recovery import release_hold
from rota.domain.results import Result, validate_result
from rota.domain.state import PendingInput
from rota.domain.waits import KeyWait, NamedWait, SchemaWait

from .harness import Story, pinned
from .test_lifecycle import started, story_with_input


def parked(wait: waits.WaitPredicate | None) -> Story:
    story = story_with_input()
    started(story)
    story.when(lambda w: lc.finish(w, 1, 1, story.now, Result(outcome="waiting", wait=wait)))
    assert story.state.state == "waiting"
    return story


def give(story: Story, key: str, payload: Any = None) -> int:
    (position,) = story.apply(lc.accept_input(story.work, work_id="w", payload=payload, key=key))
    return position


def resume(story: Story) -> AttemptResumed:
    (emit,) = story.when(lambda w: lc.claim(w, now=story.now, owner="h2", pinned=pinned()))
    assert isinstance(emit.event, AttemptResumed)
    return emit.event


def test_a_key_wait_is_woken_only_by_its_key_and_the_wake_starts_the_segment() -> None:
    story = parked(KeyWait(key="approval"))
    other = give(story, "chatter", {"say": "hi"})
    assert story.state.state == "waiting"
    assert not story.state.startable  # the non-matching input queues
    story.refused(lambda w: lc.claim(w, now=story.now, owner="h2", pinned=pinned()), "not_eligible")
    wake = give(story, "approval", {"ok": True})
    assert story.state.startable
    resumed = resume(story)
    assert (resumed.wake, resumed.consumed) == (wake, [wake])
    attempt = story.state.current
    assert attempt is not None
    segment = attempt.segments[-1]
    assert (segment.kind, segment.wake) == ("resume", wake)
    # The queued input is kept, pending and visible, for a later wait or attempt.
    assert [p.position for p in story.state.pending] == [other]
    assert attempt.wait is None


def test_queued_input_is_considered_again_by_a_later_wait_it_matches() -> None:
    story = parked(KeyWait(key="a"))
    queued = give(story, "b", {"n": 1})
    give(story, "a")
    resume(story)
    assert [p.key for p in story.state.pending] == ["b"]
    # The resumed attempt waits again, now for "b": the queued input wakes it at once.
    epoch = story.state.current.epoch  # type: ignore[union-attr]
    again = Result(outcome="waiting", wait=KeyWait(key="b"))
    story.when(lambda w: lc.finish(w, 1, epoch, story.now, again))
    assert story.state.startable
    assert resume(story).wake == queued
    assert story.state.pending == ()


def test_a_schema_wait_matches_payloads_the_subset_accepts() -> None:
    schema = {
        "type": "object",
        "required": ["decision"],
        "properties": {"decision": {"enum": ["approve", "reject"]}, "n": {"type": "integer"}},
    }
    story = parked(SchemaWait(schema=schema))
    give(story, "k1", {"decision": "maybe"})
    give(story, "k2", {"n": 3})
    give(story, "k3", "approve")
    assert not story.state.startable
    attempt = story.state.current
    assert attempt is not None
    reasons = [waits.queued_reason(attempt, p) for p in story.state.pending]
    assert reasons == [
        "the wait's schema refuses it: payload.decision is not one of ['approve', 'reject']",
        "the wait's schema refuses it: payload has no 'decision'",
        "the wait's schema refuses it: payload is not of type object",
    ]
    wake = give(story, "k4", {"decision": "approve", "n": 2})
    assert resume(story).wake == wake
    assert len(story.state.pending) == 3


@pytest.mark.parametrize(
    ("schema", "value", "accepted"),
    [
        ({"type": "integer"}, 1.0, True),
        ({"type": "integer"}, True, False),
        ({"const": 1}, True, False),
        ({"type": ["string", "null"]}, None, True),
        ({"minimum": 2, "maximum": 3}, 4, False),
        ({"minLength": 2}, "a", False),
        ({"additionalProperties": False, "properties": {"a": {}}}, {"a": 1, "b": 2}, False),
        ({"items": {"type": "string"}}, ["a", 1], False),
        ({"items": {"type": "string"}}, ["a", "b"], True),
    ],
)
def test_the_schema_subset(schema: dict[str, Any], value: Any, accepted: bool) -> None:
    waits.check_wait(SchemaWait(schema=schema))
    assert waits.schema_accepts(schema, value) is accepted


@pytest.mark.parametrize(
    ("wait", "words"),
    [
        (SchemaWait(schema={"pattern": "^a"}), "keyword 'pattern' is not in the supported"),
        (SchemaWait(schema={"type": "date"}), "schema.type: 'date' is not one of"),
        (SchemaWait(schema={"properties": {"a": 3}}), "schema.properties.a: a schema is"),
        (KeyWait(key="bad key\n"), "wait key"),
        (NamedWait(name="Bad"), "wait predicate name"),
    ],
)
def test_a_malformed_wait_is_refused_with_its_field(wait: waits.WaitPredicate, words: str) -> None:
    with pytest.raises(InvalidCommand) as caught:
        validate_result(Result(outcome="waiting", wait=wait))
    assert caught.value.code == "invalid_wait"
    assert words in caught.value.message


def test_a_wait_only_goes_with_a_waiting_result() -> None:
    with pytest.raises(InvalidCommand) as caught:
        validate_result(Result(outcome="completed", wait=KeyWait(key="a")))
    assert caught.value.code == "invalid_wait"


def test_a_named_wait_resumes_only_on_a_recorded_match() -> None:
    story = parked(NamedWait(name="approved"))
    give(story, "k1", {"ok": False})
    give(story, "k2", {"ok": True})
    # The domain never calls the predicate: unjudged input makes the Work a candidate for
    # the start pass, which asks the application to judge it, and nothing wakes it yet.
    assert [p.key for p in waits.unjudged(story.state)] == ["k1", "k2"]
    assert waits.waking_inputs(story.state) == []
    story.refused(lambda w: lc.claim(w, now=story.now, owner="h2", pinned=pinned()), "idle")
    story.when(lambda w: waits.record_verdict(w, 1, 1, "k1", False))
    (yes,) = story.when(lambda w: waits.record_verdict(w, 1, 1, "k2", True))
    assert yes.delivery_id == "wait/w/1/1/k2"
    assert isinstance(yes.event, WaitJudged) and yes.event.matched
    assert waits.unjudged(story.state) == []
    attempt = story.state.current
    assert attempt is not None
    assert waits.queued_reason(attempt, story.state.pending[0]) == (
        "named predicate 'approved' did not match it"
    )
    resumed = resume(story)
    assert resumed.wake == story.state.current.segments[-1].wake  # type: ignore[union-attr]
    assert [p.key for p in story.state.pending] == ["k1"]
    # A verdict recorded for an older park judges nothing now.
    story.refused(lambda w: waits.record_verdict(w, 1, 1, "k1", True), "not_current")


def test_a_refused_input_is_judged_again_by_the_next_named_wait() -> None:
    story = parked(NamedWait(name="n"))
    give(story, "k1")
    give(story, "k2")
    story.when(lambda w: waits.record_verdict(w, 1, 1, "k1", False))
    story.when(lambda w: waits.record_verdict(w, 1, 1, "k2", True))
    resume(story)
    again = Result(outcome="waiting", wait=NamedWait(name="m"))
    story.when(lambda w: lc.finish(w, 1, 2, story.now, again))
    assert [p.key for p in waits.unjudged(story.state)] == ["k1"]
    assert story.state.startable


def test_a_wait_hold_is_released_by_an_operator() -> None:
    story = parked(NamedWait(name="gone"))
    give(story, "k1")
    story.when(lambda w: waits.hold_wait(w, "named wait predicate 'gone' is not registered"))
    assert story.state.state == "held" and not story.state.startable
    assert waits.unjudged(story.state) == []  # a held Work is not judged
    story.when(lambda w: release_hold(w, work_id="w", kind=None))
    assert story.state.startable and [p.key for p in waits.unjudged(story.state)] == ["k1"]


def test_a_park_without_a_predicate_is_woken_by_any_input_as_before() -> None:
    story = parked(None)
    old = (
        b'{"type":"core.execution.parked","work_id":"w","attempt":1,"epoch":1,"data":null,'
        b'"usage":{},"consumed":[],"remaining_seconds":5.0}'
    )
    decoded = msgspec.json.decode(old, type=AttemptParked)  # a park recorded before waits
    assert decoded.wait is None
    give(story, "anything")
    assert story.state.startable


def test_replaying_the_log_gives_the_same_state() -> None:
    story = parked(NamedWait(name="n"))
    give(story, "k1")
    story.when(lambda w: waits.record_verdict(w, 1, 1, "k1", True))
    resume(story)
    replayed = None
    for position, emit in story.log:
        # Decode each event from its encoding, as a replay from the log would.
        event = msgspec.json.decode(msgspec.json.encode(emit.event), type=type(emit.event))
        replayed = evolve(replayed, event, position, story.now)
    assert replayed is not None
    assert replayed.pending == story.state.pending
    assert replayed.current == story.state.current


def test_queued_reason_names_each_kind() -> None:
    story = parked(KeyWait(key="a"))
    attempt = story.state.current
    assert attempt is not None
    item = PendingInput(9, "b")
    assert waits.queued_reason(attempt, item) == "the wait is for input key 'a', not 'b'"
    assert waits.queued_reason(attempt, PendingInput(10, "a")) is None
    assert waits.describe(attempt.wait) == "input key 'a'"
