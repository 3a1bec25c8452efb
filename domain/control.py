"""Control dispatch decisions: inject and interrupt as durable intents. Pure.

A control is requested (durably), dispatched with a fresh token when its target attempt is
launched and live, performed outside the store through the attempt's pinned executor and
capabilities, and acknowledged or settled only with that same live token. A newer
executor registration never grants a capability the attempt did not pin. Late answers,
ended targets and superseded epochs can never retarget a newer attempt.
"""

from __future__ import annotations

from typing import Any

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events.control import (
    AttemptInterrupted,
    ControlAcknowledged,
    ControlDispatched,
    ControlRequested,
    ControlSettled,
)
from rota.domain.results import check_payload
from rota.domain.state import AttemptState, Control, WorkState
from rota.domain.submission import accept_input, derived_input_key

OPEN_STATES = frozenset({"pending", "dispatched"})


def _live(work: WorkState | None, work_id: str) -> tuple[WorkState, AttemptState]:
    if work is None:
        raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
    if work.terminal is not None:
        raise Refusal(f"Work {work_id!r} is {work.terminal}", code=DomainCode.WORK_TERMINAL)
    current = work.current
    if current is None or not current.live:
        raise Refusal(
            f"Work {work_id!r} has no running attempt to control", code=DomainCode.NO_LIVE_ATTEMPT
        )
    return work, current


def _capable(attempt: AttemptState, capability: str) -> None:
    if capability not in attempt.pinned.registration.capabilities:
        raise Refusal(
            f"{attempt.execution_id} runs on executor {attempt.pinned.registration.name!r}, "
            f"which did not declare {capability!r} when the attempt started",
            code=DomainCode.UNSUPPORTED_CONTROL,
        )


def request_inject(
    work: WorkState | None,
    *,
    work_id: str,
    payload: Any,
    key: str | None = None,
    requested_by: str = "operator",
) -> list[Emit]:
    """Accept input for the Work and ask its running attempt to take it now.

    A parked attempt takes injected input through its wait instead: the input is accepted
    (no control intent: nothing runs to deliver it to) and resumes the attempt when its wait
    predicate matches it, or stays queued (rota.domain.waits)."""
    current = work.current if work is not None else None
    if work is not None and work.terminal is None and current and current.status == "parked":
        check_payload(payload, "input payload")
        key = key if key is not None else derived_input_key(payload)
        return [accept_input(work, work_id=work_id, payload=payload, key=key)]
    work, attempt = _live(work, work_id)
    _capable(attempt, "inject")
    check_payload(payload, "input payload")  # before the key: a hash of it needs JSON
    key = key if key is not None else derived_input_key(payload)
    accepted = accept_input(work, work_id=work_id, payload=payload, key=key)
    intent = f"inject/{key}"
    requested = ControlRequested(
        work_id=work_id,
        intent=intent,
        kind="inject",
        attempt=attempt.number,
        epoch=attempt.epoch,
        input_key=key,
        fallback=attempt.pinned.binding.control_fallback,
        requested_by=requested_by,
    )
    return [accepted, Emit(work_stream(work_id), requested, f"control/{work_id}/{intent}")]


def request_interrupt(
    work: WorkState | None, *, work_id: str, requested_by: str = "operator"
) -> list[Emit]:
    """Fence the running attempt and leave the Work ready, then ask the executor to stop it.

    The attempt keeps its resource hold until its stop is verified.
    """
    work, attempt = _live(work, work_id)
    _capable(attempt, "interrupt")
    intent = f"interrupt/{attempt.number}/{attempt.epoch}"
    stream = work_stream(work_id)
    requested = ControlRequested(
        work_id=work_id,
        intent=intent,
        kind="interrupt",
        attempt=attempt.number,
        epoch=attempt.epoch,
        requested_by=requested_by,
    )
    fenced = AttemptInterrupted(work_id=work_id, attempt=attempt.number, epoch=attempt.epoch)
    return [Emit(stream, requested, f"control/{work_id}/{intent}"), Emit(stream, fenced)]


def _intent(work: WorkState, intent: str) -> Control:
    found = next((c for c in work.controls if c.intent == intent), None)
    if found is None:
        raise Refusal(
            f"Work {work.work_id!r} has no control {intent!r}", code=DomainCode.UNKNOWN_CONTROL
        )
    return found


def dispatchable(work: WorkState, control: Control) -> bool:
    """Ready to send: pending, and its target is running (launched, not launching, resuming
    or being recovered) at the epoch the control names (interrupts: the fenced attempt)."""
    if control.state != "pending":
        return False
    if control.kind == "interrupt":
        return True
    current = work.current
    if current is None or current.number != control.attempt or current.status != "running":
        return False
    segment = current.open_segment
    return segment is not None and (segment.invoke == "called" or segment.adopted)


def dispatch(work: WorkState, intent: str) -> Emit:
    """Claim the intent for one delivery with a fresh token."""
    control = _intent(work, intent)
    if not dispatchable(work, control):
        raise Refusal(
            f"control {intent!r} is not dispatchable now", code=DomainCode.NOT_DISPATCHABLE
        )
    current = work.current
    assert current is not None
    epoch = current.epoch if control.kind == "inject" else control.epoch
    token = f"{intent}#{control.dispatches + 1}"
    event = ControlDispatched(
        work_id=work.work_id, intent=intent, token=token, attempt=control.attempt, epoch=epoch
    )
    return Emit(work_stream(work.work_id), event)


def acknowledge(work: WorkState, intent: str, token: str) -> Emit:
    """Acknowledge with the same live token; a late or foreign token is refused."""
    control = _intent(work, intent)
    if control.state != "dispatched" or control.token != token:
        raise Refusal(
            f"control {intent!r} is {control.state} under token {control.token!r}, not {token!r}",
            code=DomainCode.STALE_TOKEN,
        )
    if control.kind == "inject":
        current = work.current
        if current is None or current.number != control.attempt or not current.live:
            raise Refusal(f"the target of {intent!r} has ended", code=DomainCode.TARGET_ENDED)
    event = ControlAcknowledged(work_id=work.work_id, intent=intent, token=token)
    return Emit(work_stream(work.work_id), event)


def settle(work: WorkState, intent: str, token: str, outcome: str) -> Emit:
    """A dispatch ended without acknowledgement (see ControlSettled)."""
    control = _intent(work, intent)
    if control.state != "dispatched" or control.token != token:
        raise Refusal(
            f"control {intent!r} is not dispatched under {token!r}", code=DomainCode.STALE_TOKEN
        )
    if outcome not in ("not_accepting", "failed", "ambiguous", "superseded"):
        raise InvalidCommand(
            f"unknown control settlement {outcome!r}", code=DomainCode.INVALID_COMMAND
        )
    event = ControlSettled(
        work_id=work.work_id,
        intent=intent,
        token=token,
        outcome=outcome,  # type: ignore[arg-type]
    )
    return Emit(work_stream(work.work_id), event)
