"""Scenarios of three events a job (issue 33): a Work's definition carries its first input
(`core.work.submitted` v3 `input`) and a claim its invoke marker (`core.execution.claimed`
v2 `invoked`). Each merged event folds exactly as the separate events an older rota wrote
(`core.input.accepted`, `core.execution.invoked`) at its position, and recovery decides
the same from either shape."""

from __future__ import annotations

import msgspec
import pytest

from rota.domain import lifecycle as lc
from rota.domain import recovery as rc
from rota.domain.emit import Emit
from rota.domain.events import (
    AttemptClaimed,
    CarriedInput,
    InputAccepted,
    Invoked,
    LaunchInvoked,
    WorkSubmitted,
    accepted_input,
)
from rota.domain.events.carried import carried, invoke_marker
from rota.domain.events.work import same_delivery
from rota.domain.state import WorkState

from .harness import Story, pinned


def submit(*inputs: lc.WorkInput, work: str = "w", kind: str = "run-once") -> list[Emit]:
    """A new Work's submit as the application decides it: its definition, then its inputs,
    the first carried by the definition."""
    command = lc.SubmitWork(work_id=work, scope="root", binding="b", kind=kind, inputs=inputs)
    emits = lc.submit(None, command)
    state = lc.new_work(command, Story().now)
    for given in inputs:
        emits.append(lc.accept_input(state, work_id=work, payload=given.payload, key=given.key))
    return lc.carry_first_input(emits)


def separate(*inputs: lc.WorkInput, work: str = "w", kind: str = "run-once") -> list[Emit]:
    """The same submit in the older shape: the definition, then each input on its own."""
    command = lc.SubmitWork(work_id=work, scope="root", binding="b", kind=kind, inputs=inputs)
    emits = lc.submit(None, command)
    state = lc.new_work(command, Story().now)
    for given in inputs:
        emits.append(lc.accept_input(state, work_id=work, payload=given.payload, key=given.key))
    return emits


def without_version(work: WorkState) -> WorkState:
    """A Work's state but for its stream version (one event less per merged event)."""
    return msgspec.structs.replace(work, version=0)


def test_the_definition_carries_the_first_input_under_its_identity() -> None:
    (defined, second) = submit(lc.WorkInput({"n": 1}, "k1"), lc.WorkInput({"n": 2}, "k2"))
    assert isinstance(defined.event, WorkSubmitted)
    assert defined.event.input == CarriedInput(key="k1", payload={"n": 1})
    assert defined.delivery_id == "input/w/k1"  # the input's own identity
    assert isinstance(second.event, InputAccepted) and second.delivery_id == "input/w/k2"
    # What it stands for: the first input, as a separate event at the definition's position.
    assert accepted_input(defined.event) == InputAccepted(work_id="w", key="k1", payload={"n": 1})
    assert carried(defined.event) == (accepted_input(defined.event),)
    # A submit without input, and an existing Work's input, are left as they are.
    (plain,) = submit()
    assert isinstance(plain.event, WorkSubmitted) and plain.event.input is None
    assert plain.delivery_id is None and carried(plain.event) == ()
    story = Story().given(plain)
    more = lc.accept_input(story.work, work_id="w", payload=1, key="k")
    assert lc.carry_first_input([more]) == [more]


def test_a_carried_input_folds_as_a_separate_one_at_the_definitions_position() -> None:
    inputs = (lc.WorkInput({"n": 1}, "k1", "thread-1"), lc.WorkInput({"n": 2}, "k2"))
    merged = Story().given(submit(*inputs))
    older = Story().given(separate(*inputs))
    assert [p.position for p in merged.state.pending] == [1, 2]  # the definition's, then 2
    assert [p.position for p in older.state.pending] == [2, 3]
    assert [(p.key, p.payload) for p in merged.state.pending] == [
        (p.key, p.payload) for p in older.state.pending
    ]
    assert merged.state.version == 2 and older.state.version == 3  # one event less
    # The claim names the definition's position as the consumed input and the trigger.
    (claim,) = merged.when(lambda w: lc.claim(w, now=merged.now, owner="h", pinned=pinned()))
    assert isinstance(claim.event, AttemptClaimed)
    assert (claim.event.consumed, claim.event.trigger) == ([1, 2], 1)
    assert merged.state.pending == ()


def test_a_claim_carrying_its_marker_folds_as_a_claim_then_a_marker() -> None:
    def claimed(isolated: bool, merge: bool) -> WorkState:
        story = Story().given(separate(lc.WorkInput({"n": 1}, "k1")))
        emit = lc.claim(story.work, now=story.now, owner="h", pinned=pinned())
        assert isinstance(emit.event, AttemptClaimed) and emit.event.invoked is None
        if merge:
            story.given(Emit(emit.stream, lc.invoke_with_claim(emit.event, isolated)))
        else:
            story.given(emit)
            story.when(lambda w: lc.invoke(w, 1, 1, story.now, isolated))
        return story.state

    for isolated in (False, True):
        merged, older = claimed(isolated, True), claimed(isolated, False)
        assert without_version(merged) == without_version(older)
        segment = merged.attempts[0].segments[0]
        assert (segment.invoke, segment.isolated) == ("called", isolated)
        assert merged.attempts[0].status == "running"


def test_the_invoke_marker_a_claim_carries_is_the_separate_event() -> None:
    story = Story().given(separate(lc.WorkInput(None, "k")))
    emit = lc.claim(story.work, now=story.now, owner="h", pinned=pinned())
    assert isinstance(emit.event, AttemptClaimed)
    marked = lc.invoke_with_claim(emit.event, True)
    assert marked.invoked == Invoked(isolated=True)
    assert invoke_marker(marked) == LaunchInvoked(work_id="w", attempt=1, epoch=1, isolated=True)
    assert carried(marked) == (invoke_marker(marked),)
    assert invoke_marker(emit.event) is None and carried(emit.event) == ()


@pytest.mark.parametrize(
    ("isolated", "metadata", "mode"),
    [(False, False, "adopt"), (True, False, "relaunch"), (True, True, "adopt")],
)
@pytest.mark.parametrize("merge", [True, False], ids=["merged", "separate"])
def test_recovery_reads_the_merged_marker_as_the_separate_one(
    isolated: bool, metadata: bool, mode: str, merge: bool
) -> None:
    """Relaunch only what provably started nothing: an isolated launch that pinned nothing;
    an unisolated call, or one that pinned recovery metadata, is adopted."""
    story = Story().given(submit(lc.WorkInput({"n": 1}, "k1")))
    emit = lc.claim(story.work, now=story.now, owner="host-a", pinned=pinned(timeout=600))
    assert isinstance(emit.event, AttemptClaimed)
    if merge:
        story.given(Emit(emit.stream, lc.invoke_with_claim(emit.event, isolated)))
    else:
        story.given(emit)
        story.when(lambda w: lc.invoke(w, 1, 1, story.now, isolated))
    if metadata:
        story.when(lambda w: lc.persist_recovery(w, 1, 1, story.now, {"pid": 7}))
    story.at(60)  # the lease expired exactly now
    (recovered,) = story.when(
        lambda w: rc.recover(w, now=story.now, owner="host-b", crash_loop_limit=5)
    )
    assert getattr(recovered.event, "mode", None) == mode
    # The invoke marker can be written once: the merged claim already wrote it.
    if merge:
        fresh = Story().given(submit(lc.WorkInput({"n": 1}, "k1")))
        claim = lc.claim(fresh.work, now=fresh.now, owner="h", pinned=pinned())
        assert isinstance(claim.event, AttemptClaimed)
        fresh.given(Emit(claim.stream, lc.invoke_with_claim(claim.event, False)))
        fresh.refused(lambda w: lc.invoke(w, 1, 1, fresh.now, False), "invoked")


def test_an_input_with_the_first_inputs_key_is_the_same_delivery() -> None:
    (defined,) = submit(lc.WorkInput({"n": 1}, "k1"))
    assert isinstance(defined.event, WorkSubmitted)
    same = InputAccepted(work_id="w", key="k1", payload={"n": 1})
    other = InputAccepted(work_id="w", key="k1", payload={"n": 2})
    assert same_delivery(defined.event, same)  # a retried submit, an accept with the key
    assert not same_delivery(defined.event, other)  # another payload: refused by the store
    assert not same_delivery(same, defined.event)  # an input is never a definition
    assert same_delivery(defined.event, defined.event)
