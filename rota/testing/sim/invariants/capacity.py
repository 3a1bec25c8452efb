"""Invariants of capacity: pool and scope limits, and slots held until a stop is confirmed
(seed 001, "Capacity pools" and "Recovery and relaunch")."""

from __future__ import annotations

from rota.application.ports import RecordedEvent
from rota.domain.events import AttemptClaimed, AttemptResumed, StopConfirmed
from rota.domain.policy import Settings
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Attempt, Model

SHOWN = 16  # the holders' positions a capacity violation names at most


class CapacityRespected(Invariant):
    """No start takes a pool or a limited scope past its limit, counting unconfirmed holds.

    Seed 001 (001_a97b7b12fa97a199.txt): "An attempt holds a slot while it is unfinished and not
    parked, and also after it ends until its resource exclusion is confirmed." and "Scope limits
    still count every pool." and "Real serializable storage prevents competing schedulers from [...]
    exceeding configured capacity." Slots only grow by a claim or a resume, so checking each of them
    checks every position. Limits are the checker's settings (`Settings.pool_limit`, 0: unbounded;
    `scope_limits` with their descendants).
    """

    name = "capacity_respected"
    events = (AttemptClaimed, AttemptResumed)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        assert isinstance(event, AttemptClaimed | AttemptResumed)
        work = model.works.get(event.work_id)
        if work is None:
            return []
        current = work.current
        execution = f"{event.work_id}/{event.attempt}"
        if isinstance(event, AttemptClaimed):
            pool = event.pinned.registration.pool
        elif current is not None and current.number == event.attempt:
            pool = current.pool
        else:
            return []
        found: list[Violation] = []
        in_pool = model.pools.get(pool, {})
        limit = self.settings.pool_limit(pool)
        if limit and len(in_pool) - (execution in in_pool) + 1 > limit:
            holders = _others(in_pool, execution)
            found.append(
                self.violation(
                    f"{execution} started in pool {pool} while {len(holders)} attempts held "
                    f"its {limit} slots ({', '.join(sorted(a.execution for a in holders))})",
                    *_positions(holders),
                    at,
                )
            )
        for scope in model.limited(work.scope):
            in_scope = model.scopes[scope]
            limit = model.scope_limits[scope]
            if len(in_scope) - (execution in in_scope) + 1 > limit:
                under = _others(in_scope, execution)
                found.append(
                    self.violation(
                        f"{execution} started under scope {scope} while {len(under)} attempts "
                        f"held its {limit} slots",
                        *_positions(under),
                        at,
                    )
                )
        return found


class SlotFreedAfterStop(Invariant):
    """A slot that holds resources is freed only by a confirmed stop.

    Seed 001 (001_a97b7b12fa97a199.txt): "Durable attempt holds survive restart, including terminal
    attempts with uncertain external processes, and count against Work/global/ancestor capacity.
    [...] Replacement remains blocked until the trusted host supplies ConfirmStopped(executionID,
    expectedEpoch)." and "Interrupt fences the old attempt and leaves Work ready before sending
    control, but retains its resource hold until stopping is verified." So a Work's next attempt is
    not claimed while its previous one still holds its slot (timed out, interrupted, cancelled while
    live, a failure that holds resources), and a stop is confirmed only for an ended attempt that
    holds one.
    """

    name = "slot_freed_after_stop"
    events = (AttemptClaimed, StopConfirmed)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        assert isinstance(event, AttemptClaimed | StopConfirmed)
        work = model.works.get(event.work_id)
        current = work.current if work is not None else None
        if current is None:
            return []
        if isinstance(event, AttemptClaimed):
            if current.status != "ended" or not current.holds:
                return []
            return [
                self.violation(
                    f"{event.work_id}/{event.attempt} claimed while {current.execution} "
                    f"({current.outcome}) still holds its slot: its stop was never confirmed",
                    current.status_at,
                    at,
                )
            ]
        if current.number != event.attempt or current.epoch != event.epoch:
            return []  # no_stale_epoch_write reports it
        if current.status == "ended" and current.holds:
            return []
        state = current.status if current.status != "ended" else f"{current.outcome}, freed"
        return [
            self.violation(
                f"stop of {current.execution} confirmed while it is {state}: it held no "
                "slot to free",
                current.status_at,
                at,
            )
        ]


def _others(holders: dict[str, Attempt], execution: str) -> list[Attempt]:
    return [a for key, a in holders.items() if key != execution]


def _positions(holders: list[Attempt]) -> list[int]:
    return sorted(a.claimed_at for a in holders)[:SHOWN]
