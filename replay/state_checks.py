"""Doctor's checks of the scheduler's state at the log head: leases, timers, capacity, holds.

Each is a warning, never a fail: expired leases no recovery took, retry timers long due,
pools over their limit, and Work held by a budget or a crash loop (with the reason).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rota.application.queries.capacity import CapacityView
from rota.application.timestamps import format_timestamp
from rota.domain.recovery import needs_recovery
from rota.projections import SchedulerProjection
from rota.replay.doctor_report import Check

OVERDUE = timedelta(minutes=1)
BUDGET_ADVICE = "raise the budget ([[budgets]]) or wait for its window, then 'rota release WORK'"
RECOVERY_ADVICE = (
    "its executor's recovery found no evidence of its attempts: check the executor and the "
    "hosts that ran them ('rota explain WORK'), confirm nothing of them runs, then "
    "'rota release WORK'"
)
CRASH_LOOP_ADVICE = (
    "find why it loses its lease before starting ('rota explain WORK'), fix that, then "
    "'rota release WORK'"
)


def _listed(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def check_leases(state: SchedulerProjection, now: datetime) -> Check:
    late = []
    for work, attempt in state.live_attempts():
        lease = timedelta(seconds=attempt.pinned.lease_seconds)
        if needs_recovery(work, now) and not work.holds and now - attempt.lease_expires_at > lease:
            expired = format_timestamp(attempt.lease_expires_at)
            pinned = attempt.pinned
            late.append(
                f"{attempt.execution_id} (epoch {attempt.epoch}, expired {expired}, "
                f"generation {pinned.generation}, executor {pinned.registration.name!r})"
            )
    if not late:
        return Check("expired_leases", "ok", "no expired lease waits for recovery")
    return Check(
        "expired_leases",
        "warn",
        f"{len(late)} attempts expired more than one lease ago: {_listed(late)}",
        "is 'rota run' running? its recovery adopts or relaunches them (16 per pass); "
        "'rota explain WORK' shows the evidence. A host without the executor of an "
        "attempt's generation leaves it alone and reports unsupported_generation: register "
        "that implementation (Scheduler.register_historical, or [[historical]] in the config)",
    )


def check_timers(state: SchedulerProjection, now: datetime) -> Check:
    late = sorted((due, work) for work, due in state.timers.items() if now - due > OVERDUE)
    if not late:
        return Check("overdue_timers", "ok", f"{len(state.timers)} retry timers, none overdue")
    shown = [f"{work} (due {format_timestamp(due)})" for due, work in late]
    return Check(
        "overdue_timers",
        "warn",
        f"{len(late)} retry timers due more than a minute ago: {_listed(shown)}",
        "is 'rota run' running? its cadence fires due timers; 'rota explain WORK'",
    )


def check_capacity(view: CapacityView) -> Check:
    """Each pool against its limit, and the ready Work a dry run of admission holds back
    (`view.preview`: doctor runs no start pass, so it has no last pass to report)."""
    parts, over, held_back = [], [], []
    for pool, cap in view.pools.items():
        limit = cap.limit or "unbounded"  # a limit of 0 is unbounded
        parts.append(f"{pool} {cap.in_use}/{limit} running, {cap.preview} held back")
        if cap.limit and cap.in_use > cap.limit:
            over.append(pool)
    for scope, use in view.scopes.items():
        parts.append(f"scope {scope} {use.in_use}/{use.limit}")
        if use.in_use > use.limit:
            over.append(f"scope {scope}")
    for w in view.preview:
        if w.code.startswith("capacity"):
            held_back.append(w.work)
    detail = "; ".join(parts) + (f"; waiting for a slot: {_listed(held_back)}" if held_back else "")
    if over:
        return Check(
            "capacity",
            "warn",
            f"over the limit in {', '.join(over)}: {detail}",
            "a limit was lowered while attempts ran (they finish) or the log holds more "
            "claims than the limit: 'rota capacity --json', 'rota replay verify'",
        )
    return Check("capacity", "ok", detail)


def check_holds(state: SchedulerProjection, kind: str, name: str, advice: str) -> Check:
    """Held Work of one kind (`budget`, `crash_loop`, `recovery_exhausted`), each with its
    reason."""
    held = sorted(
        (work.work_id, hold.reason)
        for work in state.works.values()
        for hold in work.holds
        if hold.kind == kind
    )
    if not held:
        return Check(name, "ok", f"no Work is held ({kind})")
    shown = [f"{work}: {reason}" for work, reason in held]
    return Check(name, "warn", f"{len(held)} Work held: {_listed(shown)}", advice)
