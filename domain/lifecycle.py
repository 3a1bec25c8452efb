"""The decisions of the attempt lifecycle in one namespace: `decide(state, command, now)`.

Each decision reads a `WorkState`, a command's arguments and `now`, and returns the events
to append (as `Emit`s) or raises a typed refusal; none of them reads a clock or does I/O.
They live by job: `submission` (a Work and its input), `starts` (claim, resume, the input
an attempt consumes), `fences` (the fence and the attempt's fenced writes), `outcomes`
(results, failures, turns, handoff continuation, timeouts, stop confirmation) and
`retries` (retry timers, manual retry). The application layer calls them through this
module (`rota.application.commands.lifecycle`), as do the scenario tests.
"""

from __future__ import annotations

from rota.domain.emit import Emit
from rota.domain.errors import Refusal
from rota.domain.fences import (
    MAX_LAUNCH_PHASES,
    begin_phase,
    end_phase,
    invoke,
    invoke_with_claim,
    persist_recovery,
    release,
    renew,
)
from rota.domain.outcomes import MAX_CONTINUATIONS, confirm_stopped, finish, time_out
from rota.domain.results import Result
from rota.domain.retries import fire_retry, request_retry
from rota.domain.starts import claim, select_inputs
from rota.domain.submission import (
    SubmitWork,
    WorkInput,
    accept_input,
    carry_first_input,
    derived_input_key,
    new_work,
    submit,
)

__all__ = [
    "MAX_CONTINUATIONS",
    "MAX_LAUNCH_PHASES",
    "Emit",
    "Refusal",
    "Result",
    "SubmitWork",
    "WorkInput",
    "accept_input",
    "begin_phase",
    "carry_first_input",
    "claim",
    "confirm_stopped",
    "derived_input_key",
    "end_phase",
    "finish",
    "fire_retry",
    "invoke",
    "invoke_with_claim",
    "new_work",
    "persist_recovery",
    "release",
    "renew",
    "request_retry",
    "select_inputs",
    "submit",
    "time_out",
]
