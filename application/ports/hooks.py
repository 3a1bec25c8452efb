"""The hooks a host is given: the run environment, start gates, append observers and the
trace context of a launch. Each is a plain callable; what it is called with, when, and what
its answer or failure does is said where it is declared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rota.application.ports.records import RecordedEvent
from rota.domain.policy import Binding
from rota.domain.state import AttemptState, PendingInput, WorkState

# The run-environment hook: (work, attempt) -> variables for this launch (secrets included).
# Called off the loop before the launch; what it returns reaches the executor in `ctx.env`
# and nothing else. Raising fails the attempt (`environment_unavailable`).
Environment = Callable[[WorkState, AttemptState], dict[str, str]]


@dataclass(frozen=True)
class StartHold:
    """A start gate's answer that holds the Work's first start, with the reason people see."""

    reason: str


# What a start gate answers: None (or True) lets the start go on; a `StartHold` (or any
# object with a `reason`, or a string, its reason) holds the Work (`core.gate.held`).
GateAnswer = StartHold | str | bool | None
# A start gate: `gate(work, binding, first_input) -> GateAnswer`, asked before a Work's
# first attempt once capacity allows it, outside any store transaction, and in name order
# with the other gates (the first hold or error decides). `work` is the Work as the
# projection holds it; `binding` the one its attempt would pin; `first_input` the recorded
# input that would be the attempt's first: its `position` (acceptance sequence), `key`,
# `payload` and `correlation_key`; with trigger selection `last`, the input that would
# trigger it (the newest), otherwise the oldest pending. Raising fails closed: nothing is
# held and the next pass asks again.
Gate = Callable[[WorkState, Binding, PendingInput], GateAnswer]

# A named wait predicate: `check(input) -> bool`, registered on the scheduler under the name
# a waiting result's `NamedWait(name)` gives. Asked once per pending input per park, by the
# start pass of the process that registered it, outside any store transaction; `input` is
# the recorded input (`position`, `key`, `payload`, `correlation_key`). True (exactly)
# matches: the input may resume the parked attempt; anything else leaves it queued. Each
# verdict is recorded (`core.execution.wait_judged`), so replay never asks again: it must
# be quick and decide from the input alone. Raising, or a name no predicate is registered
# under (a restart without it), holds the Work (`core.work.held`, kind `wait`, the reason
# names the predicate and the exception's type only) until an operator releases it.
WaitCheck = Callable[[PendingInput], bool]


# -- observing what was appended ----------------------------------------------------------

# An append observer: called by the transaction loop after each append with the events
# that append newly recorded, in log order (a repeated delivery identity's original is
# not new, so each decision is observed once, by the process that took it). It runs under
# the projection's lock: it must be quick, must not append, and sees only what this
# process wrote. One that raises is logged (its type only) and the append stands.
# Observers derive what an operator reads from what the log recorded: the decision log
# lines (rota.infrastructure.decision_lines), the attempt spans (infrastructure/tracing.py).
AppendObserver = Callable[[Sequence[RecordedEvent]], None]

# The W3C trace context of an attempt's launch (`traceparent`, `tracestate` when set):
# `(execution_id, epoch) -> headers`, empty when no trace is recorded. It reaches the
# executor as `ctx.trace` (shell jobs: $TRACEPARENT, $TRACESTATE) and nothing else.
TraceContext = Callable[[str, int], dict[str, str]]
