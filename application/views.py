"""JSON views of the scheduler's state: the contracts `rota work show --json` prints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rota.application.configuration import Configuration
from rota.application.ports import RecordedEvent
from rota.application.timestamps import format_timestamp
from rota.domain import admission
from rota.domain.admission import Waiting
from rota.domain.errors import DomainCode, RotaError
from rota.domain.state import AttemptState, Segment, WorkState
from rota.projections.scheduler import SchedulerProjection


def event_json(recorded: RecordedEvent) -> dict[str, Any]:
    """One event: position, stream, version, type, delivery identity, time and data."""
    return {
        "position": recorded.position,
        "stream": recorded.stream,
        "version": recorded.version,
        "type": recorded.type,
        "delivery_id": recorded.delivery_id,
        "recorded_at": recorded.recorded_at,
        "data": msgspec.to_builtins(recorded.event),
    }


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
        "consumed": [p.position for p in attempt.consumed],
        "error": error,
        "permanent": attempt.permanent,
        "usage": attempt.usage,
        "data": attempt.data,
        "remaining_seconds": attempt.remaining_seconds,
        "segments": [segment_view(s) for s in attempt.segments],
        "dropped_segments": attempt.dropped_segments,
        "dropped_active_seconds": attempt.dropped_active_seconds,
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


def work_view(work: WorkState, waiting: Waiting | None = None) -> dict[str, Any]:
    budget = work.current.pinned.binding.retry.max_attempts if work.current else None
    return {
        **_identity(work),
        "trigger": work.trigger,
        "safety": work.safety,
        "version": work.version,
        "submitted_at": _time(work.submitted_at),
        "pending": [
            {"position": p.position, "key": p.key, "correlation_key": p.correlation_key}
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
    }


def dry_run_starts(
    projection: SchedulerProjection,
    configuration: Configuration,
    now: datetime,
    ready: list[WorkState],
) -> admission.Plan:
    """A start pass of admission over `ready` (oldest first) at `now`, with no limit on
    starts and no gates: who would start and who waits why. Nothing is written."""
    settings = configuration.settings
    return admission.plan_starts(
        ready,
        now=now,
        owner=configuration.owner,
        settings=settings,
        pin=lambda work: configuration.pinned_for(work.binding),
        pool_in_use={pool: len(h) for pool, h in projection.slots.items()},
        scope_in_use=projection.scope_in_use(settings.scope_limits),
        budgets=projection.budgets,
        used=projection.used,
        notified=projection.notified,
        gated=False,
        limit=len(ready) + 1,
    )


def capacity_view(
    projection: SchedulerProjection, configuration: Configuration, now: datetime
) -> dict[str, Any]:
    """`rota capacity --json`: per pool its limit (0: unbounded), in_use and waiting; who
    waits and why. The pools are `agents`, `jobs`, every pool named in `pool_limits` or
    declared by a registered executor, and any pool the log holds slots in.

    `waiting` comes from a dry run of admission over the ready Work at `now` (nothing is
    written), so it is true in any process, not only in the daemon.
    """
    settings = configuration.settings
    declared = (r.pool for r in configuration.registrations.values())
    pools = {"agents", "jobs", *projection.slots, *settings.pool_limits, *declared}
    plan = dry_run_starts(projection, configuration, now, projection.ready_order())
    by_pool: dict[str, int] = dict.fromkeys(pools, 0)
    for item in plan.waiting:
        work = projection.works.get(item.work_id)
        if work is None or item.code not in (
            DomainCode.CAPACITY_CONCURRENCY,
            DomainCode.CAPACITY_JOB_CONCURRENCY,
            DomainCode.CAPACITY_POOL,
        ):
            continue
        try:
            pool = configuration.pinned_for(work.binding).registration.pool
        except RotaError:
            continue
        by_pool[pool] = by_pool.get(pool, 0) + 1
    return {
        "pools": {
            pool: {
                "limit": settings.pool_limit(pool),
                "in_use": projection.in_use(pool),
                "waiting": by_pool.get(pool, 0),
            }
            for pool in sorted(pools)
        },
        "scopes": {
            scope: {"limit": limit, "in_use": projection.scope_in_use([scope])[scope]}
            for scope, limit in sorted(settings.scope_limits.items())
        },
        "waiting": [{"work": w.work_id, "code": w.code, "detail": w.detail} for w in plan.waiting],
    }


def work_summary(work: WorkState, waiting: Waiting | None = None) -> dict[str, Any]:
    current = work.current
    return {
        **_identity(work),
        "attempts": len(work.attempts),
        "last_outcome": current.outcome if current else None,
        "waiting": None if waiting is None else waiting.code,
    }
