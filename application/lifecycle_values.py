"""The values the lifecycle commands take and return: a submit request, the attempts a
start pass claimed and the Works it left waiting, what a retry-timer page fired."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


class SubmitRequest(msgspec.Struct, frozen=True):
    """One `submit`: a Work's definition and the inputs `(payload, key, correlation)`."""

    work_id: str
    spec: dict[str, Any]
    inputs: Sequence[tuple[Any, str | None, str | None]] = ()


def submit_request(
    work_id: str,
    *,
    binding: str,
    scope: str = "root",
    kind: str = "run-once",
    trigger: str = "all",
    safety: str = "undeclared",
    inputs: Sequence[tuple[Any, str | None, str | None]] = (),
) -> SubmitRequest:
    spec = {"scope": scope, "binding": binding, "kind": kind, "trigger": trigger, "safety": safety}
    return SubmitRequest(work_id, spec, tuple(inputs))


__all__ = ["Claimed", "FiredTimers", "StartPass", "SubmitRequest", "submit_request"]
