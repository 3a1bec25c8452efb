"""Pure decisions of the schedule runner: which nominal times fire, which are skipped, why.

`plan(state, now, busy)` takes a schedule's state (its definition and boundary: the last
nominal time accounted for), the time now and how busy its Work is, and returns the fires
and the skipped ranges that account for every nominal time in (boundary, now], and the new
boundary. A nominal time is due at `nominal + jitter`. The catch-up policy decides after a
gap (a restart, a clock jump): `none` fires a due time only when the runner comes to it
within `NONE_GRACE`, `latest` fires the newest due time in the catch-up window, `all` fires
every due time in the window, the newest `max_catchup`. What the policy does not fire is
skipped (`outside_catchup_window`, `coalesced`). The overlap policy decides when the
previous run is still pending or running (`overlap`). Paused: every due time is skipped
(`paused`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from rota.domain.events.schedule import (
    CatchUp,
    Overlap,
    ScheduleDefined,
    ScheduleFired,
    ScheduleSkipped,
    SkipReason,
)
from rota.domain.schedule_specs import Spec, jitter, times_after

NONE_GRACE = timedelta(seconds=60)  # `catchup = "none"`: how late a fire may still be made
BUFFER_LIMIT = 16  # `overlap = "buffer_all"`: at most this many pending runs
PLAN_LIMIT = 100_000  # nominal times one plan enumerates at most (a longer gap: next tick)


class Busy(msgspec.Struct, frozen=True):
    """How busy a schedule's Work is: pending inputs, and whether an attempt is live."""

    pending: int = 0
    running: bool = False


class Fire(msgspec.Struct, frozen=True):
    nominal: datetime
    due: datetime
    cancel_running: bool = False


class Skip(msgspec.Struct, frozen=True):
    first: datetime
    last: datetime
    count: int
    reason: SkipReason


class Plan(msgspec.Struct, frozen=True):
    fires: list[Fire]
    skips: list[Skip]
    boundary: datetime
    next_due: datetime | None


def overlap_allows(overlap: Overlap, busy: Busy) -> bool:
    """Whether a fire may add a run to a Work that is `busy` (seed 001: one pending run)."""
    if overlap in ("allow_all", "cancel_other"):
        return True
    if overlap == "skip":
        return busy.pending == 0 and not busy.running
    if overlap == "buffer_one":
        return busy.pending == 0
    return busy.pending < BUFFER_LIMIT  # buffer_all, bounded


def plan(
    definition: ScheduleDefined,
    spec: Spec,
    *,
    boundary: datetime,
    now: datetime,
    busy: Busy,
    paused: bool = False,
    fired: frozenset[datetime] = frozenset(),
) -> Plan:
    """The fires and skips that account for every nominal time due in (boundary, now].

    `fired`: nominal times after the boundary a backfill already fired (accounted for)."""
    name = definition.name
    due: list[tuple[datetime, datetime]] = []  # (nominal, due)
    upcoming: datetime | None = None
    for nominal in times_after(spec, definition.anchor, boundary):
        at = nominal + jitter(name, nominal, definition.jitter_seconds)
        if at > now or len(due) >= PLAN_LIMIT:
            upcoming = at
            break
        due.append((nominal, at))
    if not due:
        return Plan([], [], boundary, upcoming)
    new_boundary = due[-1][0]
    if paused:  # (a time a backfill fired is accounted for: never skipped as well)
        paused_runs: list[tuple[datetime, SkipReason | None]] = [
            (n, None if n in fired else "paused") for n, _ in due
        ]
        return Plan([], _skip_runs(paused_runs), new_boundary, upcoming)
    window = timedelta(seconds=definition.catchup_window_seconds)
    if definition.catchup == "none":
        window = min(window, NONE_GRACE)
    inside = [(n, d) for n, d in due if now - d <= window]
    outside = [n for n, d in due if now - d > window]
    chosen = _chosen(definition.catchup, definition.max_catchup, inside)
    # A time a backfill fired is accounted for, inside the window or not: it is never
    # skipped as well (simulator seed 12: a backfill fired 05:45, then the runner, past the
    # window, recorded 05:45 skipped: one time both fired and skipped).
    verdicts: list[tuple[datetime, SkipReason | None]] = [
        (n, None if n in fired else "outside_catchup_window") for n in outside
    ]
    pending, running = busy.pending, busy.running
    fires: list[Fire] = []
    for nominal, at in inside:
        if nominal in fired:
            verdicts.append((nominal, None))  # a backfill fired it already
            continue
        if nominal not in chosen:
            verdicts.append((nominal, "coalesced"))
            continue
        if not overlap_allows(definition.overlap, Busy(pending, running)):
            verdicts.append((nominal, "overlap"))
            continue
        cancel = definition.overlap == "cancel_other" and running
        fires.append(Fire(nominal, at, cancel_running=cancel))
        verdicts.append((nominal, None))
        pending += 1
        if cancel:
            # That fire interrupts the running attempt; a later fire of this plan finds it
            # interrupted already and must not interrupt it again (simulator, issue 29:
            # two catch-up fires wrote two interrupts of one attempt in one append).
            running = False
    return Plan(fires, _skip_runs(verdicts), new_boundary, upcoming)


def _chosen(
    catchup: CatchUp, max_catchup: int, inside: list[tuple[datetime, datetime]]
) -> set[datetime]:
    if not inside:
        return set()
    if catchup == "all":
        return {n for n, _ in inside[-max(1, max_catchup) :]}
    return {inside[-1][0]}  # latest; none (its window is the grace)


def _skip_runs(verdicts: list[tuple[datetime, SkipReason | None]]) -> list[Skip]:
    """Consecutive skipped nominal times with one reason, as ranges (fires split them)."""
    verdicts.sort(key=lambda v: v[0])
    skips: list[Skip] = []
    run: list[datetime] = []
    reason: SkipReason | None = None
    for nominal, why in verdicts:
        if why != reason or why is None:
            if run and reason is not None:
                skips.append(Skip(run[0], run[-1], len(run), reason))
            run = []
        reason = why
        if why is not None:
            run.append(nominal)
    if run and reason is not None:
        skips.append(Skip(run[0], run[-1], len(run), reason))
    return skips


def fired_event(
    definition: ScheduleDefined,
    fire: Fire,
    work: str,
    key: str,
    manual: bool = False,
    backfill: bool = False,
    actor: str | None = None,
) -> ScheduleFired:
    return ScheduleFired(
        name=definition.name,
        nominal=fire.nominal,
        due=fire.due,
        schedule_version=definition.schedule_version,
        binding=definition.binding,
        work_id=work,
        input_key=key,
        manual=manual,
        backfill=backfill,
        actor=actor,
    )


def skipped_event(definition: ScheduleDefined, skip: Skip) -> ScheduleSkipped:
    return ScheduleSkipped(
        name=definition.name,
        schedule_version=definition.schedule_version,
        first=skip.first,
        last=skip.last,
        count=skip.count,
        reason=skip.reason,
    )
