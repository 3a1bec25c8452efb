"""Every domain event type, and the one union the codec decodes.

`ALL_EVENTS` lists each type once; a tag is never reused. `docs/events.md` is generated
from this list (a test checks it is current).
"""

from __future__ import annotations

from .base import Event
from .execution import (
    OUTCOMES,
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptResumed,
    AttemptTimedOut,
    CapacityClaimed,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    LeaseReleased,
    LeaseRenewed,
    RecoveryPersisted,
    StopConfirmed,
    TurnPublished,
)
from .recovery import AttemptLost, AttemptRecovered, HoldReleased, WorkHeld
from .retry import ManualRetry, RetryArmed, RetryFired, RetryRequested
from .work import InputAccepted, WorkSubmitted

ALL_EVENTS: tuple[type[Event], ...] = (
    WorkSubmitted,
    InputAccepted,
    AttemptClaimed,
    AttemptResumed,
    CapacityClaimed,
    LaunchInvoked,
    LaunchPhaseBegan,
    LaunchPhaseEnded,
    RecoveryPersisted,
    LeaseRenewed,
    LeaseReleased,
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptTimedOut,
    StopConfirmed,
    TurnPublished,
    RetryArmed,
    RetryFired,
    ManualRetry,
    RetryRequested,
    AttemptRecovered,
    AttemptLost,
    WorkHeld,
    HoldReleased,
)

__all__ = [
    "ALL_EVENTS",
    "OUTCOMES",
    "AttemptClaimed",
    "AttemptCompleted",
    "AttemptFailed",
    "AttemptHandedOff",
    "AttemptLost",
    "AttemptParked",
    "AttemptRecovered",
    "AttemptResumed",
    "AttemptTimedOut",
    "CapacityClaimed",
    "Event",
    "HoldReleased",
    "InputAccepted",
    "LaunchInvoked",
    "LaunchPhaseBegan",
    "LaunchPhaseEnded",
    "LeaseReleased",
    "LeaseRenewed",
    "ManualRetry",
    "RecoveryPersisted",
    "RetryArmed",
    "RetryFired",
    "RetryRequested",
    "StopConfirmed",
    "TurnPublished",
    "WorkHeld",
    "WorkSubmitted",
]
