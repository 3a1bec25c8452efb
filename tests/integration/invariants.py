"""Invariants checked by replaying only the log (the reliability matrix's checks)."""

from __future__ import annotations

from collections import Counter

from rota.application.ports import EventStore
from rota.application.timestamps import parse_timestamp
from rota.projections.scheduler import SchedulerProjection


def check_log(
    store: EventStore, limits: dict[str, int], scope_limits: dict[str, int] | None = None
) -> SchedulerProjection:
    """Fold the log from position 0 and assert, at every position:
    - no pool holds more slots than its limit, no limited scope more than its limit;
    - no Work has two live attempts at once, and attempt numbers never repeat;
    - no admission is charged to a ledger already at its max, unless the Work held a
      budget pass (a released budget hold lets exactly one start through);
    - delivery identities are unique.
    Returns the final projection."""
    projection = SchedulerProjection()
    deliveries: Counter[str] = Counter()
    position = 0
    while batch := store.read(position, 5000):
        for r in batch:
            if r.delivery_id is not None:
                deliveries[r.delivery_id] += 1
            before = projection.works.get(r.stream[5:]) if r.stream.startswith("work/") else None
            if r.type == "core.budget.charged" and r.event.source == 0:  # type: ignore[attr-defined]
                budgets = {b.id: b for b in projection.budgets}
                work = projection.works[r.event.work_id]  # type: ignore[attr-defined]
                for charge in r.event.charges:  # type: ignore[attr-defined]
                    total = projection.used(charge.budget, charge.ledger, charge.window)
                    assert total < budgets[charge.budget].max or work.budget_pass, (
                        f"position {r.position}: {charge.budget} charged past its max"
                    )
            if r.type == "core.execution.claimed" and before is not None:
                live = [a for a in before.attempts if a.live]
                assert not live, f"position {r.position}: a second attempt while {live} is live"
                assert r.event.attempt == len(before.attempts) + 1  # type: ignore[attr-defined]
            projection.apply(
                r.position, r.stream, r.version, parse_timestamp(r.recorded_at), r.event
            )
            for scope, count in projection.scope_in_use(scope_limits or {}).items():
                assert count <= (scope_limits or {})[scope], (
                    f"position {r.position}: scope {scope} holds {count}"
                )
            for pool, holders in projection.slots.items():
                limit = limits.get(pool)
                assert limit is None or len(holders) <= limit, (
                    f"position {r.position}: pool {pool} holds {len(holders)} > {limit}"
                )
        position = batch[-1].position
    duplicated = [d for d, n in deliveries.items() if n > 1]
    assert not duplicated, duplicated
    return projection
