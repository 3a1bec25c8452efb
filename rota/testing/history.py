"""What happened, read back from the log and the read models: the answers a test asserts on.

Every reader takes a `rota.Scheduler` and reads only what any client of it may read: the
schedule history (`scheduler.schedules.history`), the Work and attempt views
(`scheduler.executions`) and the Work's own stream of events
(`scheduler.queries.activity.stream`). Nothing here looks at private state, so what a test
sees is what the log recorded, and the same readers work on any store, not only the kit's.

Times are aware `datetime`s in UTC (the log's times); compare them with times in any zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.application.ports.timestamps import parse_timestamp
from rota.application.queries.work_views import AttemptView
from rota.domain.events.admission import BudgetHeld
from rota.domain.events.recovery import HoldReleased
from rota.domain.events.retry import RetryArmed
from rota.scheduler import Scheduler

# The schedule history is read whole (a month of minutely fires is 43,200 rows); a skipped
# range of more than ten times this many nominal times reads as one row (its first time).
HISTORY_LIMIT = 100_000


@dataclass(frozen=True)
class Fire:
    """One fire of a schedule: its nominal time, the Work it fed and how that run ended
    (`outcome`: `completed`, `failed`, `pending`, ... or None when nothing ran it yet)."""

    nominal: datetime
    work: str | None
    outcome: str | None
    manual: bool
    backfill: bool


@dataclass(frozen=True)
class Skip:
    """A nominal time a schedule did not fire, and why (`overlap`, `paused`, `coalesced`,
    `outside_catchup_window`, or the quarantine's reason)."""

    nominal: datetime
    reason: str


@dataclass(frozen=True)
class Attempt:
    """One attempt of a Work: when it started and ended (virtual time), how it ended."""

    number: int
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str | None
    error_code: str | None


@dataclass(frozen=True)
class Retry:
    """A retry timer a failure armed: the failed attempt, when it failed, when the timer
    was due, and when the next attempt actually started (None: not yet)."""

    after_attempt: int
    failed_at: datetime
    due_at: datetime
    started_at: datetime | None

    @property
    def delay(self) -> timedelta:
        """The delay the timer was armed with (the retry policy's, or the hint's)."""
        return self.due_at - self.failed_at


@dataclass(frozen=True)
class BudgetHold:
    """A start a budget refused (`core.budget.held`): when, which budget, ledger and window,
    the reason in words, and when the hold was released (None: still held)."""

    at: datetime
    budget: str
    ledger: str
    window: str
    reason: str
    released_at: datetime | None


def _time(text: str | None) -> datetime | None:
    return None if text is None else parse_timestamp(text)


def fires(scheduler: Scheduler, schedule: str) -> list[Fire]:
    """Every fire of `schedule`, oldest nominal time first (manual and backfill included)."""
    found = []
    for entry in scheduler.schedules.history(schedule, limit=HISTORY_LIMIT):
        if entry.status != "fired":
            continue
        work = entry.work if isinstance(entry.work, str) else None
        outcome = entry.outcome if isinstance(entry.outcome, str) else None
        found.append(
            Fire(
                nominal=parse_timestamp(entry.nominal),
                work=work,
                outcome=outcome,
                manual=entry.manual is True,
                backfill=entry.backfill is True,
            )
        )
    return found


def fired_at(scheduler: Scheduler, schedule: str) -> list[datetime]:
    """The nominal times `schedule` fired for by its cadence (and backfills), oldest first;
    manual fires (`trigger_now`) are left out: they have no nominal time of the spec."""
    return [fire.nominal for fire in fires(scheduler, schedule) if not fire.manual]


def skipped(scheduler: Scheduler, schedule: str) -> list[Skip]:
    """The nominal times `schedule` skipped (or a quarantine accounted for), with reasons."""
    return [
        Skip(nominal=parse_timestamp(entry.nominal), reason=str(entry.reason))
        for entry in scheduler.schedules.history(schedule, limit=HISTORY_LIMIT)
        if entry.status != "fired"
    ]


def _attempt(view: AttemptView) -> Attempt:
    segments = view.segments
    return Attempt(
        number=view.number,
        started_at=_time(segments[0].started_at) if segments else None,
        ended_at=_time(segments[-1].ended_at) if segments else None,
        outcome=view.outcome,
        error_code=view.error.code if view.error is not None else None,
    )


def attempts(scheduler: Scheduler, work_id: str) -> list[Attempt]:
    """The Work's attempts, oldest first (empty for an unknown Work)."""
    return [_attempt(view) for view in scheduler.executions(work_id)]


def retries(scheduler: Scheduler, work_id: str) -> list[Retry]:
    """Every retry timer the Work's failures armed (`core.retry.armed`), oldest first,
    with the start of the attempt that followed each."""
    started = {a.number: a.started_at for a in attempts(scheduler, work_id)}
    found = []
    for recorded in scheduler.queries.activity.stream(work_id):
        event = recorded.event
        if isinstance(event, RetryArmed):
            found.append(
                Retry(
                    after_attempt=event.attempt,
                    failed_at=recorded.recorded_time,
                    due_at=event.due_at,
                    started_at=started.get(event.attempt + 1),
                )
            )
    return found


def retried_after(scheduler: Scheduler, work_id: str) -> list[timedelta]:
    """For each retry that started: the time from the failure to the retry's start (the
    armed delay, unless something held the retry back longer)."""
    return [r.started_at - r.failed_at for r in retries(scheduler, work_id) if r.started_at]


def held_by_budget(scheduler: Scheduler, work_id: str) -> list[BudgetHold]:
    """Every start of the Work a budget refused (`core.budget.held`), oldest first, with
    when its hold was released (`core.work.released` of kind `budget`)."""
    holds: list[tuple[datetime, BudgetHeld]] = []
    released: list[datetime | None] = []
    for recorded in scheduler.queries.activity.stream(work_id):
        event = recorded.event
        if isinstance(event, BudgetHeld):
            holds.append((recorded.recorded_time, event))
            released.append(None)
        elif isinstance(event, HoldReleased) and event.kind == "budget":
            for index in range(len(released)):
                if released[index] is None:
                    released[index] = recorded.recorded_time
    return [
        BudgetHold(
            at=at,
            budget=event.budget,
            ledger=event.ledger,
            window=event.window,
            reason=event.reason,
            released_at=released_at,
        )
        for (at, event), released_at in zip(holds, released, strict=True)
    ]


__all__ = [
    "Attempt",
    "BudgetHold",
    "Fire",
    "Retry",
    "Skip",
    "attempts",
    "fired_at",
    "fires",
    "held_by_budget",
    "retried_after",
    "retries",
    "skipped",
]
