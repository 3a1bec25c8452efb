"""Projections derived from the scheduler projection: capacity, holds, budget ledgers.

Each is a pure view over `SchedulerProjection` state (slot holders, Work holds, ledger
totals), so it needs no fold of its own and no rows in the projection store: its `apply`
does nothing (the scheduler projection applies the event) and it is as current as the
scheduler projection it reads. Like every projection it has a `name`, a `version`, rows
(`row_keys()`, `row(key)`) and a canonical `digest()`, so verify can compare it and name
the first row that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

import msgspec

from rota.domain.events import Event
from rota.projections.scheduler import SchedulerProjection
from rota.projections.scheduler_rows import ledger_row

_encoder = msgspec.json.Encoder(order="sorted")


class DerivedProjection:
    """A view of the scheduler projection (see the module docstring)."""

    name = "derived"
    version = 1
    source = "scheduler"

    def __init__(self, scheduler: SchedulerProjection) -> None:
        self.scheduler = scheduler

    @property
    def position(self) -> int:
        return self.scheduler.position

    def apply(self, position: int, stream: str, version: int, at: datetime, event: Event) -> None:
        """Nothing to do: the scheduler projection this view reads applies the event."""

    def rows(self) -> dict[str, Any]:
        raise NotImplementedError

    def row_keys(self) -> Iterator[str]:
        yield from self.rows()

    def row(self, key: str) -> bytes | None:
        value = self.rows().get(key)
        return None if value is None else _encoder.encode(value)

    def digest(self) -> str:
        h = hashlib.sha256()
        for key, value in sorted(self.rows().items()):
            h.update(key.encode() + b"\n" + _encoder.encode(value) + b"\n")
        h.update(f"|{self.position}".encode())
        return h.hexdigest()


class CapacityProjection(DerivedProjection):
    """Slot holders per capacity pool and per scope (limits come from settings, not the log)."""

    name = "capacity"

    def rows(self) -> dict[str, Any]:
        scheduler = self.scheduler
        rows: dict[str, Any] = {
            f"pool/{pool}": sorted(holders) for pool, holders in scheduler.slots.items()
        }
        by_scope: dict[str, list[str]] = {}
        for execution, scope in scheduler.slot_scopes.items():
            by_scope.setdefault(scope, []).append(execution)
        rows.update({f"scope/{scope}": sorted(found) for scope, found in by_scope.items()})
        return rows

    def view(
        self,
        limit: Callable[[str], int] | None = None,
        scope_limits: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """Per pool its limit (when `limit` is given), slots in use and their holders; per
        limited scope its limit and slot holders (descendant scopes included)."""
        scheduler = self.scheduler
        pools = {"agents", "jobs", *scheduler.slots}
        limits = dict(scope_limits or {})
        counts = scheduler.scope_in_use(limits) if limits else {}
        return {
            "pools": {
                pool: {
                    "limit": limit(pool) if limit is not None else None,
                    "in_use": scheduler.in_use(pool),
                    "holders": sorted(scheduler.slots.get(pool, ())),
                }
                for pool in sorted(pools)
            },
            "scopes": {
                scope: {"limit": limits[scope], "in_use": counts.get(scope, 0)}
                for scope in sorted(limits)
            },
        }


class HoldsProjection(DerivedProjection):
    """Every Work that is held ("needs you"): each hold's kind, reason, holder, position."""

    name = "holds"

    def rows(self) -> dict[str, Any]:
        return {
            f"work/{work.work_id}": [
                {"kind": h.kind, "reason": h.reason, "holder": h.holder, "position": h.position}
                for h in work.holds
            ]
            for work in self.scheduler.works.values()
            if work.holds
        }

    def view(self) -> list[dict[str, Any]]:
        return [
            {"work": key[len("work/") :], **hold}
            for key, holds in sorted(self.rows().items())
            for hold in holds
        ]


class BudgetsProjection(DerivedProjection):
    """The budgets in force and every ledger's total (what was charged, per window)."""

    name = "budgets"

    def rows(self) -> dict[str, Any]:
        scheduler = self.scheduler
        rows: dict[str, Any] = {
            ledger_row(key): amount for key, amount in scheduler.ledgers.items()
        }
        rows["budgets"] = msgspec.to_builtins(list(scheduler.budgets))
        rows["staged"] = sorted(scheduler.staged)
        return rows

    def view(self) -> dict[str, Any]:
        scheduler = self.scheduler
        by_id = {b.id: b for b in scheduler.budgets}
        ledgers = []
        for (budget, ledger, window), used in sorted(scheduler.ledgers.items()):
            known = by_id.get(budget)
            ledgers.append(
                {
                    "budget": budget,
                    "ledger": ledger,
                    "window": window,
                    "used": used,
                    "max": known.max if known else None,
                    "unit": known.unit if known else None,
                }
            )
        return {
            "budgets": msgspec.to_builtins(list(scheduler.budgets)),
            "ledgers": ledgers,
            "staged": len(scheduler.staged),
        }


DERIVED: tuple[type[DerivedProjection], ...] = (
    CapacityProjection,
    HoldsProjection,
    BudgetsProjection,
)
