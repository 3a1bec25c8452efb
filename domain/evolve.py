"""The fold: `evolve(work, event, position, at) -> WorkState`.

Pure and deterministic: time comes only from the event (`at` is its recorded time), so a
replay of the log rebuilds exactly the state the live scheduler held. Events that do not
concern a Work's state (capacity fences, turns) leave it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from msgspec.structs import replace

from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptResumed,
    Event,
    InputAccepted,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RecoveryPersisted,
    RetryArmed,
    RetryFired,
    StopConfirmed,
    WaitJudged,
    WorkSubmitted,
)
from rota.domain.events.admission import (
    BudgetHeld,
    GateHeld,
    GateRefused,
    GateReleased,
    WorkCancelled,
)
from rota.domain.events.control import (
    AttemptInterrupted,
    ControlAcknowledged,
    ControlDispatched,
    ControlRequested,
    ControlSettled,
)
from rota.domain.events.execution import _Outcome
from rota.domain.events.flow import SubmitMerged, WorkReprioritized
from rota.domain.events.recovery import (
    AttemptAdopted,
    AttemptLost,
    AttemptRecovered,
    AttemptRecoveryFailed,
    HoldReleased,
    WorkHeld,
)
from rota.domain.events.retry import _RetryRequest
from rota.domain.evolve_attempt import (
    on_claimed,
    on_invoked,
    on_outcome,
    on_phase_began,
    on_phase_ended,
    on_recovery_persisted,
    on_released,
    on_resumed,
    on_stop_confirmed,
    on_wait_judged,
)
from rota.domain.evolve_recovery import control, interrupted
from rota.domain.evolve_work import (
    on_adopted,
    on_budget_held,
    on_cancelled,
    on_gate_held,
    on_gate_released,
    on_hold_released,
    on_input,
    on_lost,
    on_recovered,
    on_recovery_failed,
    on_retry_armed,
    on_retry_fired,
    on_retry_request,
    on_work_held,
)
from rota.domain.state import AttemptState, PendingInput, WorkState, with_flow


def evolve(work: WorkState | None, event: Event, position: int, at: datetime) -> WorkState | None:
    """Apply one event of the Work's stream; returns the new state."""
    if isinstance(event, WorkSubmitted):
        if work is not None:
            return replace(work, version=work.version + 1)
        # Its first input, when it carries one, is pending at this position, exactly as a
        # `core.input.accepted` here would be (`on_input`).
        carried = event.input
        return WorkState(
            work_id=event.work_id,
            scope=event.scope,
            binding=event.binding,
            kind=event.kind,
            trigger=event.trigger,
            safety=event.safety,
            version=1,
            submitted_at=at,
            grants=tuple(event.grants),
            flow=event.flow,
            pending=()
            if carried is None
            else (PendingInput(position, carried.key, carried.payload, carried.correlation_key),),
        )
    if work is None:
        return None
    kind = type(event)
    if isinstance(event, LeaseRenewed):
        # The most frequent event of a long log (every live attempt renews its lease), so
        # it skips the rule table.
        return renew(work, event.lease_expires_at)
    fast = _FAST.get(kind)
    if fast is not None:
        return fast(work, event, position, at)  # bumps the version in its one copy
    work = replace(work, version=work.version + 1)
    rule = _RESOLVED.get(kind)
    if rule is None:
        rule = _resolve(kind)
    return rule(work, event, position, at)


def renew(work: WorkState, lease_expires_at: datetime, count: int = 1) -> WorkState:
    """`count` lease renewals in a row (the last one's expiry): the current attempt's lease
    moves, the Work's version counts each event. One copy of the Work, whatever `count`:
    a bulk fold folds a run of renewals with it (`SchedulerProjection.fold_page`)."""
    attempts = work.attempts
    if not attempts:
        return replace(work, version=work.version + count)
    renewed = replace(attempts[-1], lease_expires_at=lease_expires_at)
    return replace(work, version=work.version + count, attempts=(*attempts[:-1], renewed))


# -- the rules, one per kind of event ---------------------------------------------------
#
# Each rule takes the Work with its version already bumped; the rules live by kind of
# event in `evolve_work`, `evolve_attempt` and `evolve_recovery`. `_RULES` is ordered: an event
# takes the first rule whose types it is an instance of (as an isinstance chain would),
# resolved once per concrete event type and cached in `_RESOLVED`, so the fold of a long
# log pays one dict lookup per event, not a walk down the chain.

Rule = Callable[[WorkState, Any, int, datetime], WorkState]
CurrentRule = Callable[[WorkState, AttemptState, Any, int, datetime], WorkState]


def _on_current(rule: CurrentRule) -> Rule:
    """A rule for an event about the current attempt: a Work without one is unchanged."""

    def apply(work: WorkState, event: Any, position: int, at: datetime) -> WorkState:
        attempt = work.current
        if attempt is None:
            return work
        return rule(work, attempt, event, position, at)

    return apply


def _unchanged(work: WorkState, event: Event, position: int, at: datetime) -> WorkState:
    return work


def _flow(work: WorkState, **changes: object) -> WorkState:
    """A flow-control change of the Work (`core.work.reprioritized`, a merged submit's
    moved start)."""
    return replace(work, flow=with_flow(work.flow, **changes))


_RULES: tuple[tuple[type | tuple[type, ...], Rule], ...] = (
    (InputAccepted, on_input),
    (AttemptClaimed, lambda work, event, position, at: on_claimed(work, event, at)),
    (AttemptResumed, lambda work, event, position, at: on_resumed(work, event, at)),
    (
        (ControlRequested, ControlDispatched, ControlAcknowledged, ControlSettled),
        lambda work, event, position, at: control(work, event, position),
    ),
    (AttemptInterrupted, lambda work, event, position, at: interrupted(work, event, at)),
    (_Outcome, on_outcome),
    (BudgetHeld, on_budget_held),
    (GateHeld, on_gate_held),
    (GateReleased, on_gate_released),
    ((GateRefused, WorkCancelled), on_cancelled),
    (WorkHeld, on_work_held),
    (HoldReleased, on_hold_released),
    (AttemptRecovered, on_recovered),
    (AttemptAdopted, on_adopted),
    (AttemptLost, on_lost),
    (AttemptRecoveryFailed, on_recovery_failed),
    (_RetryRequest, on_retry_request),
    (RetryArmed, on_retry_armed),
    (RetryFired, on_retry_fired),
    (LaunchInvoked, _on_current(on_invoked)),
    (LaunchPhaseBegan, _on_current(on_phase_began)),
    (LaunchPhaseEnded, _on_current(on_phase_ended)),
    # LeaseRenewed: `evolve` applies it before the table (`renew`).
    (LeaseReleased, _on_current(on_released)),
    (RecoveryPersisted, _on_current(on_recovery_persisted)),
    (StopConfirmed, _on_current(on_stop_confirmed)),
    (WaitJudged, _on_current(on_wait_judged)),
    (WorkReprioritized, lambda work, event, position, at: _flow(work, priority=event.priority)),
    (SubmitMerged, lambda work, event, position, at: _flow(work, not_before=event.not_before)),
)
_RESOLVED: dict[type, Rule] = {}


def _invoked(work: WorkState, event: LaunchInvoked, position: int, at: datetime) -> WorkState:
    attempt = work.current
    if attempt is None:
        return replace(work, version=work.version + 1)
    return on_invoked(work, attempt, event, position, at, bump=1)


# The events of every attempt's life, by exact type, with the rule `_RULES` gives them,
# each taking the Work as it was (version not yet bumped) and bumping it in the one copy
# it makes: one copy of the Work less per event than the table's rules.
_FAST: dict[type, Rule] = {
    InputAccepted: lambda work, event, position, at: on_input(work, event, position, at, bump=1),
    AttemptClaimed: lambda work, event, position, at: on_claimed(work, event, at, bump=1),
    LaunchInvoked: _invoked,
    AttemptCompleted: lambda work, event, position, at: on_outcome(
        work, event, position, at, bump=1
    ),
}


def _resolve(kind: type) -> Rule:
    """The first rule of `_RULES` for events of type `kind` (cached)."""
    rule = next((rule for types, rule in _RULES if issubclass(kind, types)), _unchanged)
    _RESOLVED[kind] = rule
    return rule
