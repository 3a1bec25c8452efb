"""The decision log in an embedded scheduler: a repeated delivery logs nothing new, a gate's
hold and its release are lines, a failing observer never fails an append, and the
secret canaries of test_secrets reach no line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import rota
from rota.infrastructure.decision_lines import DECISIONS, FIELDS_ATTRIBUTE

CANARY = "canary-decision-6e1f0b"


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r.getMessage(), getattr(r, FIELDS_ATTRIBUTE))
        for r in caplog.records
        if r.name == DECISIONS
    ]


def test_a_repeated_submit_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=DECISIONS)
    with rota.open("memory://") as scheduler:
        scheduler.register("job", lambda ctx: "ok")
        for _ in range(3):
            scheduler.submit("w", binding="job", input={"n": 1}, input_key="k")
    said = [message for message, _ in _lines(caplog)]
    assert said == ["work submitted", "input accepted"]
    (accepted,) = [f for m, f in _lines(caplog) if m == "input accepted"]
    # (carried by the Work's definition: its position and delivery identity)
    assert accepted["delivery_id"] == "input/w/k" and accepted["position"] == 1
    assert accepted["event"] == "core.input.accepted"


def test_a_gate_hold_and_its_release_are_lines_with_the_gate_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=DECISIONS)
    with rota.open("memory://") as scheduler:
        scheduler.register("job", lambda ctx: "ok")
        scheduler.register_gate("review", lambda work, binding, first: rota.StartHold("wait"))
        scheduler.submit("w", binding="job")
        scheduler.tick()
        scheduler.settle_gate("w", "review", admit=True)
        scheduler.run_until_idle(timeout=30)
    lines = _lines(caplog)
    held = next(f for m, f in lines if m == "work held by gate")
    assert (held["kind"], held["gate"], held["reason"], held["work"]) == (
        "gate",
        "review",
        "wait",
        "w",
    )
    said = [m for m, _ in lines]
    assert said.index("work held by gate") < said.index("gate released")
    assert said.index("gate released") < said.index("attempt started")
    assert said[-1] == "attempt completed"


def test_a_failing_observer_is_logged_by_type_and_the_append_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(recorded: object) -> None:
        raise RuntimeError(f"observer text {CANARY}")

    caplog.set_level(logging.DEBUG)
    with rota.open("memory://") as scheduler:
        scheduler.service.observe(broken)
        scheduler.register("job", lambda ctx: "ok")
        scheduler.submit("w", binding="job")
        scheduler.run_until_idle(timeout=30)
        assert scheduler.work("w").state == "completed"  # type: ignore[union-attr]
    failures = [r for r in caplog.records if r.name == "rota.transactions"]
    assert failures and all(
        r.getMessage() == "an append observer failed: RuntimeError" for r in failures
    )
    assert all(CANARY not in r.getMessage() for r in caplog.records)
    assert [m for m, _ in _lines(caplog)][-1] == "attempt completed"  # the others still told


def test_an_environment_value_and_a_raised_secret_reach_no_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rota.infrastructure.logging import JsonFormatter, TextFormatter

    def job(ctx: rota.LaunchContext) -> str:
        raise RuntimeError(f"failing with {ctx.env['API_TOKEN']}")

    caplog.set_level(logging.DEBUG)
    with rota.open("memory://") as scheduler:
        scheduler.register("job", job, config={"environment": {"API_TOKEN": CANARY}})
        scheduler.submit("w", binding="job", input={"token": CANARY})
        scheduler.run_until_idle(timeout=30)
    assert any(m == "attempt failed" for m, _ in _lines(caplog))
    raised = [r for r in caplog.records if r.exc_info]  # the executor's warning, with its traceback
    assert raised
    for formatter in (JsonFormatter(), TextFormatter()):
        for record in caplog.records:
            assert CANARY not in formatter.format(record)
