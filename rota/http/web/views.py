"""What the web view's pages show, read from the scheduler: the same read models as the API
(the holds, capacity and audit routes are called as functions, so a page and its route
cannot disagree), plus the overview's counts, the budgets' ledgers and doctor's fast checks.

The Works list (`works_list`) reads `scheduler.queries.activity`
(`rota.application.queries.activity`); `failure` picks a Work's newest failed attempt, its
error and output tails, from the Work's view.

Schedules: `schedule_rows` and `schedule_detail` read the schedules facade
(`scheduler.schedules`, `rota.application.queries.schedule_reads`), as `GET /v1/schedules` does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_args

import msgspec

from rota.application.timestamps import format_timestamp, parse_timestamp
from rota.domain import budgets as budget_rules
from rota.domain.state import WorkStateName
from rota.http.context import ApiContext
from rota.http.routes import system
from rota.http.routes.schedules import HISTORY, NEXT, release_hint
from rota.projections.scheduler import SchedulerProjection
from rota.projections.work_pages import WorkFilter
from rota.replay.doctor_report import Check
from rota.replay.log_checks import check_checkpoint
from rota.replay.state_checks import (
    BUDGET_ADVICE,
    CRASH_LOOP_ADVICE,
    RECOVERY_ADVICE,
    check_holds,
    check_leases,
    check_timers,
)
from rota.scheduler import Scheduler

STATES: tuple[str, ...] = get_args(WorkStateName)
FIRES_SHOWN = 10  # the newest schedule fires a Work's page lists
TAIL_LINES = 40  # the last lines of a failed attempt's stderr (and stdout) shown
ACTIVE = ("ready", "running", "waiting", "retry_wait", "held")


@dataclass(frozen=True)
class HoldRow:
    """A needs-you entry: the hold, and which of the web view's actions clear it."""

    work: str
    kind: str
    reason: str
    holder: str | None
    position: int
    clears: str  # release, settle_gate
    api: str  # the route that clears it, for scripts


@dataclass(frozen=True)
class LedgerRow:
    budget: str
    unit: str
    per: str
    period: str
    ledger: str
    window: str
    used: float
    limit: float
    current: bool  # the window `now` falls in

    @property
    def percent(self) -> float:
        return 100.0 if self.limit <= 0 else min(100.0, 100.0 * self.used / self.limit)


def now(scheduler: Scheduler) -> datetime:
    return scheduler.queries.state.now()


def overview(api: ApiContext) -> dict[str, Any]:
    """Counts by state, holds by kind, the pools, the loop and the head: the first page."""
    scheduler = api.scheduler
    counts = scheduler.queries.works.counts()  # over every Work, not every Work in memory
    states: Counter[str] = Counter()
    for (name, _), n in counts.states.items():
        states[name] += n
    holds = Counter(counts.holds)
    total = counts.works
    state = system.scheduler_state(api)
    return {
        "states": [(s, states.get(s, 0)) for s in STATES],
        "total": total,
        "active": sum(states.get(s, 0) for s in ACTIVE),
        "holds": sorted(holds.items()),
        "held": sum(holds.values()),
        "failed": states.get("failed", 0),
        "capacity": system.capacity(api),
        "scheduler": state,
        "head": scheduler.store.head(),
        "recent": [
            msgspec.to_builtins(e)
            for e in reversed(scheduler.events(after=max(0, state.position - 8), limit=8))
        ],
    }


def works_list(
    scheduler: Scheduler,
    *,
    state: str,
    scope: str,
    binding: str,
    search: str,
    sort: str,
    after: str,
    before: int | None,
    limit: int,
) -> dict[str, Any]:
    """A page of the Works list: by last activity, newest first (`sort` `recent`, paged by
    log position `before`), or by id (paged by the id `after`); `search` is in the id."""
    activity = scheduler.queries.activity
    if sort == "recent":
        found = activity.recent_works(
            before=before,
            limit=limit,
            state=state or None,
            scope=scope or None,
            binding=binding or None,
            search=search or None,
        )
        return {"works": found.works, "next_after": None, "next_before": found.before}
    if search:
        where = WorkFilter(state or None, scope or None, binding or None)
        ids, cursor = activity.search_ids(search, after=after, limit=limit, where=where)
    else:
        page, cursor = scheduler.works_page(
            state=state or None,
            scope=scope or None,
            binding=binding or None,
            after=after or None,
            limit=limit,
        )
        ids = [w.id for w in page]
    return {"works": activity.rows(ids), "next_after": cursor, "next_before": None}


def failure(view: dict[str, Any]) -> dict[str, Any] | None:
    """The newest failed attempt of a Work: its error, and its stderr and stdout tails (a
    shell command's data), the last `TAIL_LINES` lines each; None if no attempt failed."""
    for attempt in reversed(view["attempts"]):
        if attempt["error"] is None and attempt["outcome"] not in ("failed", "timed_out", "lost"):
            continue
        data = attempt["data"] if isinstance(attempt["data"], dict) else {}
        tails = {}
        for name in ("stderr_tail", "stdout_tail"):
            text = data.get(name)
            if isinstance(text, str) and text.strip():
                tails[name] = "\n".join(text.rstrip("\n").splitlines()[-TAIL_LINES:])
        return {
            "attempt": attempt["number"],
            "outcome": attempt["outcome"] or attempt["state"],
            "error": attempt["error"],
            "permanent": attempt["permanent"],
            "exit_code": data.get("exit_code"),
            "stderr": tails.get("stderr_tail"),
            "stdout": tails.get("stdout_tail"),
        }
    return None


def needs_you(api: ApiContext) -> list[HoldRow]:
    """Every hold, oldest first, with the action that clears it (as `GET /v1/holds`)."""
    return [
        HoldRow(
            work=h.work,
            kind=h.kind,
            reason=h.reason,
            holder=h.holder,
            position=h.position,
            clears="settle_gate" if h.kind == "gate" else "release",
            api=h.clears,
        )
        for h in system.holds(api).holds
    ]


def ledgers(scheduler: Scheduler) -> list[LedgerRow]:
    """Each budget in force and every ledger window it has charged, the current first."""
    at = now(scheduler)
    rows: list[LedgerRow] = []
    found = scheduler.queries.state.ledgers()
    charged = found.charged
    for budget in found.budgets:
        current = budget_rules.window(budget, at)
        mine = {(ledger, w): used for (b, ledger, w), used in charged.items() if b == budget.id}
        if budget.per == "all" and ("all", current) not in mine:
            mine[("all", current)] = 0.0
        for (ledger, window), used in sorted(
            mine.items(), key=lambda i: (i[0][1] != current, i[0])
        ):
            rows.append(
                LedgerRow(
                    budget=budget.id,
                    unit=budget.unit,
                    per=budget.per,
                    period=budget.period,
                    ledger=ledger,
                    window=window,
                    used=used,
                    limit=float(budget.max),
                    current=window == current,
                )
            )
    return rows


def audit(api: ApiContext) -> dict[str, Any]:
    """The chain head, the newest checkpoint and its age, and doctor's fast checks."""
    scheduler = api.scheduler
    head = system.audit_head(api)
    at = now(scheduler)
    age: float | None = None
    if head.checkpoint is not None:
        age = max(0.0, (at - parse_timestamp(str(head.checkpoint["written_at"]))).total_seconds())
    store, checkpoint_dir = scheduler.store, scheduler.config.audit.checkpoint_dir

    def checked(state: SchedulerProjection, _: datetime) -> list[Check]:
        return [
            check_checkpoint(store, checkpoint_dir),
            check_leases(state, at),
            check_timers(state, at),
            check_holds(state, "budget", "budgets", BUDGET_ADVICE),
            check_holds(state, "crash_loop", "crash_loop", CRASH_LOOP_ADVICE),
            check_holds(state, "recovery_exhausted", "recovery_exhausted", RECOVERY_ADVICE),
        ]

    found = scheduler.queries.state.at_head(checked)
    checks, applied = found.value, found.applied
    return {
        "head": head,
        "checkpoint_age": age,
        "checkpoint_dir": scheduler.config.audit.checkpoint_dir,
        "checks": checks,
        "applied": applied,
        "now": format_timestamp(at),
    }


SKIPS_SHOWN = 5  # the recent skipped nominal times a list row shows


def schedule_rows(scheduler: Scheduler) -> list[dict[str, Any]]:
    """The schedules by name: state, health (ok, stuck or quarantined, with the reason:
    the read doctor's `schedule_health` makes), next fire (none while paused or
    quarantined), last fire, the recent skipped nominal times with their reasons,
    quarantine."""
    facade = scheduler.schedules
    health = {h.name: h for h in scheduler.queries.schedules.health()}
    found = []
    for view in facade.list():
        row = msgspec.to_builtins(view)
        name = view.name
        upcoming = msgspec.to_builtins(facade.next(name, 1)) if view.state == "active" else []
        recent = msgspec.to_builtins(facade.history(name, limit=50))
        skipped = [
            {"at": e["nominal"], "reason": e["reason"]} for e in recent if e["status"] == "skipped"
        ][-SKIPS_SHOWN:]
        found.append(
            {
                **row,
                "next_fire": upcoming[0]["nominal"] if upcoming else None,
                "last_fire": row["last_fired"],
                "skipped_recent": skipped,
                "release": release_hint(name, row),
                "health": health[name].status if name in health else "ok",
                "health_reason": health[name].reason if name in health else None,
            }
        )
    return found


def schedule_detail(scheduler: Scheduler, name: str) -> dict[str, Any]:
    """One schedule as `GET /v1/schedules/{name}` answers it (unknown: `unknown_schedule`)."""
    facade = scheduler.schedules
    shown = msgspec.to_builtins(facade.show(name))
    return {
        "schedule": shown,
        "next": msgspec.to_builtins(facade.next(name, NEXT)),
        "history": list(reversed(msgspec.to_builtins(facade.history(name, limit=HISTORY)))),
        "release": release_hint(name, shown),
    }
