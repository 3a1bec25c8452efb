"""Settling start-gate holds, and cancelling Work. Pure decisions."""

from __future__ import annotations

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, Refusal
from rota.domain.events.admission import GateRefused, GateReleased, WorkCancelled
from rota.domain.state import WorkState


def settle(
    work: WorkState | None, *, work_id: str, registration: str, admit: bool, reason: str = ""
) -> Emit:
    """Only the holding registration settles its hold: admit (one pass) or refuse (cancel)."""
    if work is None:
        raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
    hold = next((h for h in work.holds if h.kind == "gate"), None)
    if hold is None:
        raise Refusal(f"Work {work_id!r} is not held by a start gate", code=DomainCode.NOT_HELD)
    if hold.holder != registration:
        raise Refusal(
            f"Work {work_id!r} is held by gate {hold.holder!r}; {registration!r} cannot settle it",
            code=DomainCode.NOT_HOLDER,
        )
    decision = "released" if admit else "refused"
    event: GateReleased | GateRefused = (
        GateReleased(work_id=work_id, registration=registration, reason=reason)
        if admit
        else GateRefused(work_id=work_id, registration=registration, reason=reason)
    )
    return Emit(work_stream(work_id), event, f"gate/{work_id}/{registration}/{decision}")


def cancel(work: WorkState | None, *, work_id: str, reason: str = "", by: str = "operator") -> Emit:
    """Cancel a Work that is not already finished."""
    if work is None:
        raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
    if work.terminal is not None:
        raise Refusal(f"Work {work_id!r} is already {work.terminal}", code=DomainCode.WORK_TERMINAL)
    return Emit(work_stream(work_id), WorkCancelled(work_id=work_id, reason=reason, by=by))
