"""The JSON contract of the Work views, spelled out as dicts: the reference the typed views
(`rota.application.queries.work_views`) must encode to byte for byte. These were the CLI's
own builders; the product now builds each view once, typed, and this copy stays as the
test's oracle (`test_views_are_frozen_structs_equal_to_the_json_views`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rota.application.ports import RecordedEvent
from rota.application.timestamps import format_timestamp
from rota.domain import waits
from rota.domain.admission import Waiting
from rota.domain.state import AttemptState, Segment, WorkState


def event_json(recorded: RecordedEvent) -> dict[str, Any]:
    """One event: position, stream, version, type, delivery identity, time and data."""
    return {
        "position": recorded.position,
        "stream": recorded.stream,
        "version": recorded.version,
        "type": recorded.type,
        "delivery_id": recorded.delivery_id,
        "recorded_at": recorded.recorded_at,
        "data": _every_field(recorded.event),
    }


def _every_field(value: Any) -> Any:
    """An event's data with every field, those its stored JSON leaves out at their defaults
    too (the newer event versions omit them; a view shows them all)."""
    if isinstance(value, msgspec.Struct):
        tag = value.__struct_config__.tag
        out: dict[str, Any] = {} if tag is None else {"type": tag}
        for field in msgspec.structs.fields(value):
            out[field.encode_name] = _every_field(getattr(value, field.name))
        return out
    if isinstance(value, list):
        return [_every_field(item) for item in value]
    if isinstance(value, dict):
        return {key: _every_field(item) for key, item in value.items()}
    return msgspec.to_builtins(value)


def _time(when: datetime | None) -> str | None:
    return None if when is None else format_timestamp(when)


def segment_view(segment: Segment) -> dict[str, Any]:
    return {
        "kind": segment.kind,
        "epoch": segment.epoch,
        "started_at": _time(segment.started_at),
        "ended_at": _time(segment.ended_at),
        "invoke": segment.invoke,
        "isolated": segment.isolated,
        "wake": segment.wake,
        "phases": [
            {
                "name": p.name,
                "began_at": _time(p.began_at),
                "ended_at": _time(p.ended_at),
                "outcome": p.outcome,
            }
            for p in segment.phases
        ],
    }


def attempt_view(attempt: AttemptState) -> dict[str, Any]:
    error = None
    if attempt.error_code is not None:
        error = {"code": attempt.error_code, "message": attempt.error_message or ""}
    return {
        "number": attempt.number,
        "execution": attempt.execution_id,
        "epoch": attempt.epoch,
        "state": attempt.status,
        "outcome": attempt.outcome,
        "owner": attempt.owner,
        "lease_expires_at": _time(attempt.lease_expires_at),
        "deadline": _time(attempt.deadline),
        "released": attempt.released,
        "stop_confirmed": attempt.stop_confirmed,
        "executor": attempt.pinned.registration.name,
        "generation": attempt.pinned.generation,
        "grants": list(attempt.grants),
        "consumed": [p.position for p in attempt.consumed],
        "error": error,
        "permanent": attempt.permanent,
        "usage": attempt.usage,
        "data": attempt.data,
        "artifacts": [msgspec.to_builtins(a) for a in attempt.artifacts],
        "remaining_seconds": attempt.remaining_seconds,
        "segments": [segment_view(s) for s in attempt.segments],
        "dropped_segments": attempt.dropped_segments,
        "dropped_active_seconds": attempt.dropped_active_seconds,
        "wait": _wait(attempt),
    }


def _wait(attempt: AttemptState) -> dict[str, Any] | None:
    """A parked attempt's wait predicate (None while not parked)."""
    if attempt.status != "parked":
        return None
    wait = attempt.wait
    return {
        "kind": "any" if wait is None else wait.__struct_config__.tag,
        "describe": waits.describe(wait),
        "predicate": None if wait is None else msgspec.to_builtins(wait),
    }


def _identity(work: WorkState) -> dict[str, Any]:
    """The fields `work_view` and `work_summary` both begin with, in this order."""
    return {
        "id": work.work_id,
        "state": work.state,
        "scope": work.scope,
        "binding": work.binding,
        "kind": work.kind,
    }


def _flow(work: WorkState) -> dict[str, Any]:
    """The flow-control fields, in this order (after `grants`, after `kind`)."""
    return {
        "priority": work.priority,
        "keys": list(work.keys),
        "cost": work.cost,
        "throttle": msgspec.to_builtins(work.throttle),
    }


def work_view(work: WorkState, waiting: Waiting | None = None) -> dict[str, Any]:
    budget = work.current.pinned.binding.retry.max_attempts if work.current else None
    current = work.current
    parked = current if current is not None and current.status == "parked" else None
    return {
        **_identity(work),
        "trigger": work.trigger,
        "safety": work.safety,
        "grants": list(work.grants),
        **_flow(work),
        "version": work.version,
        "submitted_at": _time(work.submitted_at),
        "pending": [
            {
                "position": p.position,
                "key": p.key,
                "correlation_key": p.correlation_key,
                "queued": None if parked is None else waits.queued_reason(parked, p),
            }
            for p in work.pending
        ],
        "attempts": [attempt_view(a) for a in work.attempts],
        "retry": {
            "failures": work.retry.failures,
            "budget": budget,
            "next_due": _time(work.retry.next_due),
            "blocked_reason": work.retry.blocked_reason,
        },
        "waiting": None if waiting is None else {"code": waiting.code, "detail": waiting.detail},
        "holds": [
            {"kind": h.kind, "reason": h.reason, "holder": h.holder, "position": h.position}
            for h in work.holds
        ],
        "controls": [
            {
                "intent": c.intent,
                "kind": c.kind,
                "state": c.state,
                "attempt": c.attempt,
                "epoch": c.epoch,
                "dispatches": c.dispatches,
                "input_position": c.input_position,
                "fallback": c.fallback,
                "position": c.position,
            }
            for c in work.controls
        ],
        "passes": [
            name for name, on in (("budget", work.budget_pass), ("gate", work.gate_pass)) if on
        ],
        "priority": work.priority,
        "keys": list(work.keys),
        "cost": work.cost,
    }


def work_summary(work: WorkState, waiting: Waiting | None = None) -> dict[str, Any]:
    current = work.current
    return {
        **_identity(work),
        **_flow(work),
        "attempts": len(work.attempts),
        "last_outcome": current.outcome if current else None,
        "waiting": None if waiting is None else waiting.code,
    }
