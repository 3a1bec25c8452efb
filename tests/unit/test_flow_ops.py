"""The operator's flow-control decisions (`rota.domain.flow_ops`): given a state, when a
priority change, a pause or a resume is asked, then one event, nothing, or a refusal."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rota.domain.errors import RotaError
from rota.domain.events.flow import FlowPaused, FlowResumed, WorkReprioritized
from rota.domain.flow_ops import pause, reprioritize, resume
from rota.domain.state import WorkState, with_flow


def work(priority: int = 0, **fields: Any) -> WorkState:
    return WorkState(
        work_id="w",
        scope="root",
        binding="b",
        kind="run-once",
        trigger="all",
        safety="undeclared",
        version=1,
        submitted_at=datetime(2026, 11, 2, tzinfo=UTC),
        flow=with_flow(None, priority=priority),
        **fields,
    )


def code_of(call: Any) -> str:
    with pytest.raises(RotaError) as raised:
        call()
    return str(raised.value.code)


def test_a_new_priority_is_one_event_on_the_work_stream() -> None:
    emit = reprioritize(work(priority=1), work_id="w", priority=7, by="ada", reason="board")
    assert emit is not None and emit.stream == "work/w"
    assert emit.event == WorkReprioritized(
        work_id="w", priority=7, previous=1, by="ada", reason="board"
    )


def test_the_same_priority_again_is_no_event() -> None:
    assert reprioritize(work(priority=3), work_id="w", priority=3) is None


@pytest.mark.parametrize("priority", [1001, -1001, 1.5, "3", True, None])
def test_a_priority_out_of_range_or_not_an_integer_is_invalid_flow(priority: Any) -> None:
    assert code_of(lambda: reprioritize(work(), work_id="w", priority=priority)) == "invalid_flow"


def test_unknown_and_finished_work_are_refused_with_their_codes() -> None:
    assert code_of(lambda: reprioritize(None, work_id="w", priority=1)) == "unknown_work"
    done = work(terminal="completed")
    assert code_of(lambda: reprioritize(done, work_id="w", priority=1)) == "work_terminal"


def test_a_pause_is_one_event_and_pausing_again_is_none() -> None:
    emit = pause({}, target="pool", name="jobs", reason="upgrade", by="ada")
    assert emit is not None and emit.stream == "flow/pauses"
    assert emit.event == FlowPaused(target="pool", name="jobs", reason="upgrade", by="ada")
    assert pause({"pool:jobs": "upgrade"}, target="pool", name="jobs", reason="other") is None
    # Another target of the same name is another pause.
    assert pause({"pool:jobs": ""}, target="key", name="jobs") is not None


def test_resume_of_what_is_paused_is_one_event_and_of_anything_else_not_paused() -> None:
    emit = resume({"key:tenant:acme": ""}, target="key", name="tenant:acme", by="ada")
    assert emit.event == FlowResumed(target="key", name="tenant:acme", by="ada")
    assert code_of(lambda: resume({}, target="key", name="tenant:acme")) == "not_paused"
    paused = {"pool:tenant": ""}
    assert code_of(lambda: resume(paused, target="key", name="tenant")) == "not_paused"


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("queue", "jobs"),  # not a target
        ("pool", "a/b"),  # a pool name has no slash
        ("pool", ""),
        ("key", "tenant acme"),  # a key has no space
        ("key", ":acme"),
        ("scope", "root//a"),
        ("scope", "/root"),
        ("scope", "r" * 201),
        ("pool", 3),
    ],
)
def test_a_target_or_a_name_not_of_its_form_is_invalid_flow(target: Any, name: Any) -> None:
    assert code_of(lambda: pause({}, target=target, name=name)) == "invalid_flow"
    assert code_of(lambda: resume({}, target=target, name=name)) == "invalid_flow"


def test_names_of_each_form_pause() -> None:
    for target, name in [("pool", "jobs"), ("key", "resource:stripe/eu"), ("scope", "root/a.b")]:
        assert pause({}, target=target, name=name) is not None


def test_a_reason_or_actor_too_long_is_invalid_command() -> None:
    long = "x" * 1001
    assert code_of(lambda: pause({}, target="pool", name="jobs", reason=long)) == (
        "invalid_command"
    )
    assert code_of(lambda: reprioritize(work(), work_id="w", priority=1, by="b" * 201)) == (
        "invalid_command"
    )
