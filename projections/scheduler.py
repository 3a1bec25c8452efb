"""The scheduler projection: every Work's state, what is ready, what holds a slot, timers.

A deterministic fold of the log: `apply()` takes each recorded event in position order
and updates the Works through `rota.domain.evolve`, plus the indices the cadence needs
(startable Works, slot holders per pool, live leases, due timers, pool stream versions).
It reads time only from events and never appends, so a projection rebuilt from position 0
equals the one maintained live (`digest()` compares them).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from datetime import datetime

import msgspec

from rota.domain.events import (
    BudgetCharged,
    BudgetExceeded,
    BudgetsConfigured,
    BudgetWarning,
    CapacityClaimed,
    Event,
)
from rota.domain.events.admission import Budget
from rota.domain.events.execution import _Outcome
from rota.domain.evolve import evolve
from rota.domain.state import AttemptState, WorkState


def _plain(obj: object) -> object:
    # A datetime subclass (freezegun's, in tests) encodes as a datetime would.
    if isinstance(obj, datetime):
        return obj.isoformat().replace("+00:00", "Z")
    raise TypeError(f"cannot encode {type(obj).__name__}")


_digest_encoder = msgspec.json.Encoder(enc_hook=_plain)


class SchedulerProjection:
    """In-memory fold of the log; not thread-safe (the service serializes access)."""

    name = "scheduler"
    version = 1

    def __init__(self) -> None:
        self.position = 0
        self.works: dict[str, WorkState] = {}
        self.startable: set[str] = set()
        self._ready: list[tuple[int, str]] = []
        self.slots: dict[str, set[str]] = {}
        self.live: dict[str, str] = {}
        self.timers: dict[str, datetime] = {}
        self.pool_versions: dict[str, int] = {}
        self.turns = 0
        # Which scope each slot holder's Work is in (scope limits count every pool).
        self.slot_scopes: dict[str, str] = {}
        self.scope_versions: dict[str, int] = {}
        # Budgets in force, ledger totals, usage staged but not yet charged, notices sent.
        self.budgets: tuple[Budget, ...] = ()
        self.ledgers: dict[tuple[str, str, str], float] = {}
        self.staged: dict[int, tuple[str, str, dict[str, float], datetime]] = {}
        self.notified: set[str] = set()
        self.ledger_version = 0

    def apply(self, position: int, stream: str, version: int, at: datetime, event: Event) -> None:
        if position <= self.position:
            return
        self.position = position
        if stream.startswith("work/"):
            work_id = stream[5:]
            before = self.works.get(work_id)
            after = evolve(before, event, position, at)
            if after is None:
                return
            self.works[work_id] = after
            self._index(before, after)
            if self.budgets and isinstance(event, _Outcome) and event.usage:
                execution = f"{work_id}/{event.attempt}"
                self.staged[position] = (work_id, execution, dict(event.usage), at)
        elif stream.startswith("pool/"):
            if isinstance(event, CapacityClaimed):
                self.pool_versions[event.pool] = version
        elif stream.startswith("turns/"):
            self.turns += 1
        elif stream.startswith("scope/"):
            self.scope_versions[stream[6:]] = version
        elif stream == "budget/ledgers":
            self.ledger_version = version
            if isinstance(event, BudgetsConfigured):
                self.budgets = tuple(event.budgets)
                if not self.budgets:
                    self.staged.clear()
            elif isinstance(event, BudgetCharged):
                for charge in event.charges:
                    key = (charge.budget, charge.ledger, charge.window)
                    self.ledgers[key] = self.ledgers.get(key, 0.0) + charge.amount
                self.staged.pop(event.source, None)
        elif stream == "budget/notices" and isinstance(event, BudgetWarning | BudgetExceeded):
            kind = "warning" if isinstance(event, BudgetWarning) else "exceeded"
            self.notified.add(
                f"budget-notice/{kind}/{event.budget}/{event.ledger}/{event.window}/{event.scope}"
            )

    def _index(self, before: WorkState | None, after: WorkState) -> None:
        work_id = after.work_id
        if after.startable:
            self.startable.add(work_id)
            first = after.pending[0].position
            if before is None or not before.startable or before.pending[0].position != first:
                heapq.heappush(self._ready, (first, work_id))
        else:
            self.startable.discard(work_id)
        if after.retry.next_due is not None:
            self.timers[work_id] = after.retry.next_due
        else:
            self.timers.pop(work_id, None)
        if before is not None and before.current is not None:
            old = before.current
            self.slots.get(old.pinned.registration.pool, set()).discard(old.execution_id)
            self.live.pop(old.execution_id, None)
            self.slot_scopes.pop(old.execution_id, None)
        current = after.current
        if current is not None:
            if current.holds_slot:
                self.slots.setdefault(current.pinned.registration.pool, set()).add(
                    current.execution_id
                )
                self.slot_scopes[current.execution_id] = after.scope
            if current.live:
                self.live[current.execution_id] = work_id

    # -- queries --------------------------------------------------------------------

    def in_use(self, pool: str) -> int:
        return len(self.slots.get(pool, ()))

    def scope_in_use(self, scopes: Iterable[str]) -> dict[str, int]:
        """Slot holders (every pool) under each scope, its descendants included."""
        counts = dict.fromkeys(scopes, 0)
        for scope in self.slot_scopes.values():
            for limited in counts:
                if scope == limited or scope.startswith(limited + "/"):
                    counts[limited] += 1
        return counts

    def used(self, budget: str, ledger: str, window: str) -> float:
        return self.ledgers.get((budget, ledger, window), 0.0)

    def ready_order(self, limit: int | None = None) -> list[WorkState]:
        """Startable Works, oldest pending input first (at most `limit` of them).

        A heap of (first pending position, Work) with lazy deletion: entries whose Work is
        no longer startable, or whose first pending input changed, are dropped when met.
        A pass costs O(limit log n), not a sort of every ready Work.
        """
        if limit is None:
            limit = len(self.startable)
        heap, works, startable = self._ready, self.works, self.startable
        found: list[WorkState] = []
        seen: set[str] = set()
        while heap and len(found) < limit:
            position, work_id = heapq.heappop(heap)
            work = works.get(work_id)
            if (
                work is None
                or work_id not in startable
                or work_id in seen
                or not work.pending
                or work.pending[0].position != position
            ):
                continue
            seen.add(work_id)
            found.append(work)
        for work in found:
            heapq.heappush(heap, (work.pending[0].position, work.work_id))
        return found

    def attempt(self, execution_id: str) -> tuple[WorkState, AttemptState] | None:
        work_id, _, number = execution_id.rpartition("/")
        work = self.works.get(work_id)
        if work is None or not number.isdigit():
            return None
        index = int(number) - 1
        if index < 0 or index >= len(work.attempts):
            return None
        return work, work.attempts[index]

    def live_attempts(self) -> Iterable[tuple[WorkState, AttemptState]]:
        for work_id in list(self.live.values()):
            work = self.works[work_id]
            if work.current is not None:
                yield work, work.current

    def next_due(self) -> datetime | None:
        return min(self.timers.values()) if self.timers else None

    def digest(self) -> str:
        """A canonical SHA-256 of the whole state: equal states, equal digests."""
        h = hashlib.sha256()
        for work_id in sorted(self.works):
            h.update(_digest_encoder.encode(self.works[work_id]))
            h.update(b"\n")
        h.update(_digest_encoder.encode(sorted(self.pool_versions.items())))
        h.update(_digest_encoder.encode(sorted(self.scope_versions.items())))
        h.update(_digest_encoder.encode(list(self.budgets)))
        h.update(_digest_encoder.encode(sorted(self.ledgers.items())))
        h.update(_digest_encoder.encode(sorted(self.staged)))
        h.update(_digest_encoder.encode(sorted(self.notified)))
        h.update(f"|{self.turns}|{self.position}".encode())
        return h.hexdigest()
