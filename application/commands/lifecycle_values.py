"""The values the lifecycle commands return: the attempts a start pass claimed and the
Works it left waiting, what a retry-timer page fired (a submit's command is the domain's
`SubmitWork`)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from rota.domain.admission import Waiting
from rota.domain.state import AttemptState, WorkState


class Claimed(msgspec.Struct, frozen=True):
    """An attempt this service just claimed (or resumed), ready to launch."""

    work: WorkState
    attempt: AttemptState
    resume: bool


class FiredTimers(msgspec.Struct, frozen=True):
    """What one retry-timer page did: how many timers fired, and whether more are due."""

    fired: int
    has_more: bool


class StartPass(msgspec.Struct):
    claimed: list[Claimed]
    waiting: list[Waiting]
    asks: list[str] = msgspec.field(default_factory=list)
    judge: list[str] = msgspec.field(default_factory=list)  # parked Work: judge its input
    next_token: datetime | None = None  # when Work held back for tokens may start


__all__ = ["Claimed", "FiredTimers", "StartPass"]
