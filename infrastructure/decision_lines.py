"""The decision log: one log line for each event this process appended, derived from the
recorded event by a table of event type -> kind, message, level and whitelisted fields.

`DecisionLog` is an append observer (`rota.application.ports.AppendObserver`): the
transaction loop hands it the events each append newly recorded, so every decision is
logged exactly once, by the process that took it, whatever command group decided it.

Every line carries `event` (the type), `work`, `execution`, `epoch`, `position` and
`delivery_id` (null where the event has none); the table adds the fields it names, and
nothing else of the event is read: never a payload, a result's data, a control's detail,
recovery metadata, a turn's comment or a pinned binding's config. A type missing from the
table is logged at DEBUG as `event recorded`, so a new event type is logged from the day
it exists; give it an entry in `LINES` (or with `add_line`) to name it at INFO.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rota.application.ports import RecordedEvent
from rota.domain.events import AttemptClaimed, InputAccepted, LaunchInvoked, WorkSubmitted
from rota.domain.events.carried import carried

DECISIONS = "rota.decisions"  # the logger every decision line is written to
FIELDS_ATTRIBUTE = "rota_fields"  # the LogRecord attribute the formatters read fields from
DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


@dataclass(frozen=True)
class Line:
    """How one event type is logged: its kind of decision, message, level, and the event
    attributes it shows (`fields`: output name -> attribute name). `variant` names an
    attribute whose value picks another (kind, message) from `variants`."""

    kind: str
    message: str
    level: int = INFO
    fields: Mapping[str, str] = field(default_factory=dict)
    variant: str | None = None
    variants: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def _shown(*names: str, **renamed: str) -> dict[str, str]:
    return {**{name: name for name in names}, **renamed}


_OUTCOME = _shown("outcome")
LINES: dict[str, Line] = {
    # starts
    "core.execution.claimed": Line("start", "attempt started", fields=_shown("owner", "deadline")),
    "core.execution.resumed": Line("start", "attempt resumed", fields=_shown("owner", "wake")),
    # outcomes (the `outcome` field is the event's outcome name, added below)
    "core.execution.completed": Line("outcome", "attempt completed"),
    "core.execution.failed": Line(
        "outcome",
        "attempt failed",
        WARNING,
        _shown("error_code", "error_message", "permanent", "retry_unknown", "holds_resources"),
    ),
    "core.execution.handed_off": Line("outcome", "attempt handed off"),
    "core.execution.parked": Line("outcome", "attempt parked", fields=_shown("remaining_seconds")),
    "core.execution.timed_out": Line("outcome", "attempt timed out", WARNING),
    "core.execution.handoff": Line("outcome", "handoff continued", fields=_shown("continuation")),
    "core.execution.handoff_refused": Line("outcome", "handoff refused", fields=_shown("reason")),
    # retries
    "core.retry.armed": Line(
        "retry", "retry armed", fields=_shown("generation", "due_at", "hinted")
    ),
    "core.retry.fired": Line("retry", "retry fired", fields=_shown("generation")),
    "core.manual.retry": Line("retry", "retry requested", fields=_shown(by="requested_by")),
    "core.retry.requested": Line("retry", "retry requested", fields=_shown(by="requested_by")),
    # recovery, relaunch, adoption, leases and stops
    "core.execution.recovered": Line(
        "recovery",
        "attempt recovered",
        fields=_shown("previous_epoch", "owner", "previous_owner", "reason", "mode"),
        variant="mode",
        variants={"relaunch": ("relaunch", "attempt relaunched")},
    ),
    "core.execution.adopted": Line("adoption", "attempt adopted"),
    "core.execution.lost": Line("recovery", "attempt lost", WARNING, _shown("evidence")),
    "core.execution.recovery_failed": Line(
        "recovery", "recovery failed", WARNING, _shown("evidence", "failures", "limit")
    ),
    "core.execution.released": Line("lease", "lease released", fields=_shown("reason")),
    "core.execution.stop_confirmed": Line("stop", "stop confirmed", fields=_shown("evidence")),
    # holds and gates
    "core.work.held": Line(
        "hold", "work held", WARNING, _shown("reason", "holder", hold_kind="kind")
    ),
    "core.budget.held": Line(
        "hold", "work held over budget", WARNING, _shown("budget", "window", "reason")
    ),
    "core.work.released": Line(
        "hold", "hold released", fields=_shown(hold_kind="kind", by="released_by")
    ),
    "core.gate.held": Line(
        "gate", "work held by gate", WARNING, _shown("reason", gate="registration")
    ),
    "core.gate.released": Line("gate", "gate released", fields=_shown(gate="registration")),
    "core.gate.refused": Line("gate", "gate refused", WARNING, _shown(gate="registration")),
    # control
    "core.control.requested": Line(
        "control", "control requested", fields=_shown("intent", control="kind", by="requested_by")
    ),
    "core.control.dispatched": Line("control", "control dispatched", fields=_shown("intent")),
    "core.control.acknowledged": Line("control", "control acknowledged", fields=_shown("intent")),
    "core.control.settled": Line(
        "control", "control settled", fields=_shown("intent", settlement="outcome")
    ),
    "core.execution.interrupted": Line("control", "attempt interrupted"),
    "core.work.cancelled": Line("control", "work cancelled", fields=_shown("by")),
    # budgets
    "core.budget.warning": Line(
        "budget", "budget warning", WARNING, _shown("budget", "window", "scope", "used", "limit")
    ),
    "core.budget.exceeded": Line(
        "budget", "budget exceeded", WARNING, _shown("budget", "window", "scope", "used", "limit")
    ),
    # the mechanics of a launch and a lease: DEBUG
    "core.execution.invoked": Line("launch", "executor invoked", DEBUG, _shown("isolated")),
    "core.execution.phase_began": Line("launch", "launch phase began", DEBUG, _shown("phase")),
    "core.execution.phase_ended": Line(
        "launch", "launch phase ended", DEBUG, _shown("phase", "outcome")
    ),
    "core.execution.renewed": Line("lease", "lease renewed", DEBUG, _shown("lease_expires_at")),
    "core.execution.recovery_persisted": Line("launch", "recovery metadata persisted", DEBUG),
    "core.work.submitted": Line(
        "work", "work submitted", DEBUG, _shown("scope", "binding", "safety", work_kind="kind")
    ),
    "core.capacity.claimed": Line("capacity", "capacity claimed", DEBUG, _shown("pool")),
    "core.capacity.scope_claimed": Line(
        "capacity", "scope capacity claimed", DEBUG, _shown("scope")
    ),
    "core.budget.charged": Line("budget", "budget charged", DEBUG),
    "core.input.accepted": Line("work", "input accepted", DEBUG),
    # schedules (docs/schedules.md); a definition's input template is never shown
    "core.schedule.fired": Line(
        "schedule",
        "schedule fired",
        fields=_shown("nominal", "due", "schedule_version", "manual", "backfill", schedule="name"),
    ),
    "core.schedule.skipped": Line(
        "schedule",
        "schedule skipped",
        fields=_shown("first", "last", "count", "reason", schedule="name"),
    ),
    "core.schedule.quarantined": Line(
        "schedule", "schedule quarantined", WARNING, _shown("reason", "boundary", schedule="name")
    ),
    "core.schedule.defined": Line(
        "schedule",
        "schedule defined",
        fields=_shown(
            "schedule_version",
            "spec",
            "timezone",
            "binding",
            "actor",
            "reason",
            "source",
            schedule="name",
        ),
    ),
    "core.schedule.paused": Line(
        "schedule", "schedule paused", fields=_shown("actor", "reason", schedule="name")
    ),
    "core.schedule.resumed": Line(
        "schedule", "schedule resumed", fields=_shown("actor", "reason", schedule="name")
    ),
    "core.schedule.removed": Line(
        "schedule", "schedule removed", fields=_shown("actor", "reason", schedule="name")
    ),
    "core.schedule.leader_acquired": Line(
        "schedule", "schedule leader acquired", fields=_shown("owner", "term", "expires_at")
    ),
    "core.schedule.leader_renewed": Line(
        "schedule", "schedule leader renewed", DEBUG, _shown("owner", "term", "expires_at")
    ),
    "core.schedule.leader_lost": Line(
        "schedule", "schedule leader lost", WARNING, _shown("owner", "term", "reason")
    ),
    "core.schedule.leader_released": Line(
        "schedule", "schedule leader released", fields=_shown("owner", "term", "reason")
    ),
}
OTHER = Line("event", "event recorded", DEBUG)
# Events that may carry another (`rota.domain.events.carried`), logged as both: the type
# of the event each carries.
MERGED: dict[type, str] = {
    AttemptClaimed: LaunchInvoked.tag(),
    WorkSubmitted: InputAccepted.tag(),
}


def add_line(event_type: str, line: Line) -> None:
    """Name how `event_type` is logged (a later feature's events)."""
    LINES[event_type] = line


def decision_fields(recorded: RecordedEvent, line: Line | None = None) -> dict[str, Any]:
    """The fields of the line for `recorded`: the identifying ones, then the line's own."""
    event = recorded.event
    work = getattr(event, "work_id", None) or getattr(event, "work", None)
    attempt = getattr(event, "attempt", None)
    execution = getattr(event, "execution", None)
    if not isinstance(execution, str):
        execution = f"{work}/{attempt}" if work and isinstance(attempt, int) else None
    fields: dict[str, Any] = {
        "event": recorded.type,
        "work": work,
        "execution": execution,
        "epoch": getattr(event, "epoch", None),
        "position": recorded.position,
        "delivery_id": recorded.delivery_id,
    }
    outcome = getattr(type(event), "outcome_name", None)
    if isinstance(outcome, str):
        fields["outcome"] = outcome
    for name, attribute in (line or OTHER).fields.items():
        fields[name] = getattr(event, attribute, None)
    return fields


class DecisionLog:
    """An append observer that logs each newly recorded event as one decision line.

    The `rota.decisions` logger gets a `NullHandler` (once): a process that configured no
    logging sees no decision line (not even a failure's, through logging's last resort),
    and one that did gets them through its own handlers."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(DECISIONS)
        if not any(isinstance(h, logging.NullHandler) for h in self.logger.handlers):
            self.logger.addHandler(logging.NullHandler())

    def __call__(self, recorded: Sequence[RecordedEvent]) -> None:
        logger = self.logger
        # Per batch, each event class's line once, and None where its level is not enabled
        # (most events: nobody asked for DEBUG), instead of a lookup and a check per event.
        lines: dict[type, Line | None] = {}
        for r in recorded:
            kind_of_event = type(r.event)
            if kind_of_event in lines:
                line = lines[kind_of_event]
            else:
                line = LINES.get(r.type, OTHER)
                line = lines[kind_of_event] = line if logger.isEnabledFor(line.level) else None
            if line is None:
                continue
            kind, message = line.kind, line.message
            if line.variant is not None:
                chosen = str(getattr(r.event, line.variant, ""))
                kind, message = line.variants.get(chosen, (kind, message))
            fields = {"kind": kind, **decision_fields(r, line)}
            logger.log(line.level, message, extra={FIELDS_ATTRIBUTE: fields})
            carries = MERGED.get(kind_of_event)
            if carries is not None and logger.isEnabledFor(LINES.get(carries, OTHER).level):
                self._carried(r)

    def _carried(self, recorded: RecordedEvent) -> None:
        """The lines of the events a merged event carries (a definition's first input, a
        claim's invoke marker), each as its own event logs it, at the same position: a log
        of either shape gives the same lines."""
        for event in carried(recorded.event):
            line = LINES.get(event.tag(), OTHER)
            as_own = RecordedEvent(
                recorded.position,
                recorded.stream,
                recorded.version,
                recorded.delivery_id,
                recorded.recorded_at,
                event,
            )
            fields = {"kind": line.kind, **decision_fields(as_own, line)}
            self.logger.log(line.level, line.message, extra={FIELDS_ATTRIBUTE: fields})


__all__ = ["DECISIONS", "FIELDS_ATTRIBUTE", "LINES", "DecisionLog", "Line", "add_line"]
