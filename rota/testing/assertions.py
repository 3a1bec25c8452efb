"""Assertions on what the log recorded, whose failure messages say what differed.

Each takes a `rota.Scheduler` and what the test expects, reads the history
(`rota.testing.history`) and raises `AssertionError` with the difference spelled out:
the times expected but missing, the times there but not expected, each shown in the
test's zone and in UTC (`2026-03-29 03:00:00 CEST (01:00:00Z)`), so a DST night reads as
the wall clock the test thinks in. Expected times must be aware datetimes, in any zone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, tzinfo

from rota.scheduler import Scheduler
from rota.testing import history
from rota.testing.history import BudgetHold

SHOWN = 40  # the most times one message lists


def aware(when: object, what: str) -> datetime:
    """`when` as a UTC datetime; a naive datetime (it names no instant) is refused."""
    if not isinstance(when, datetime):
        raise TypeError(f"{what} must be a datetime, not {type(when).__name__} {when!r}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            f"{what} must be an aware datetime (e.g. tzinfo=datetime.UTC or a ZoneInfo), "
            f"not the naive {when.isoformat()}: a naive time names no instant"
        )
    return when.astimezone(UTC)


def show(at: datetime, zone: tzinfo = UTC) -> str:
    """One instant for a message: the zone's wall clock and UTC, or UTC alone."""
    utc = at.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{utc.microsecond:06d}Z" if utc.microsecond else "Z"
    )
    if zone is UTC:
        return text
    local = at.astimezone(zone)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({text[11:]})"


def _times(times: Iterable[datetime], zone: tzinfo) -> str:
    shown = [show(at, zone) for at in times]
    more = f"\n    ... and {len(shown) - SHOWN} more" if len(shown) > SHOWN else ""
    return "".join(f"\n    {line}" for line in shown[:SHOWN]) + more if shown else " none"


def _difference(
    title: str, expected: Sequence[datetime], actual: Sequence[datetime], zone: tzinfo
) -> str:
    missing = [at for at in expected if at not in actual]
    unexpected = [at for at in actual if at not in expected]
    lines = [title]
    if missing:
        lines.append(f"  expected, not there ({len(missing)}):{_times(missing, zone)}")
    if unexpected:
        lines.append(f"  there, not expected ({len(unexpected)}):{_times(unexpected, zone)}")
    if not missing and not unexpected:
        lines.append("  the same times, in another order or count")
    lines.append(f"  all of them ({len(actual)}):{_times(actual, zone)}")
    return "\n".join(lines)


def assert_fired(
    scheduler: Scheduler, schedule: str, at: Sequence[datetime], *, zone: tzinfo = UTC
) -> None:
    """`schedule` fired for exactly the nominal times `at`, in order (manual fires aside)."""
    expected = [aware(when, f"at[{i}]") for i, when in enumerate(at)]
    actual = history.fired_at(scheduler, schedule)
    if actual != expected:
        title = f"schedule {schedule!r} did not fire at the expected nominal times:"
        raise AssertionError(_difference(title, expected, actual, zone))


def assert_skipped(
    scheduler: Scheduler,
    schedule: str,
    at: Sequence[datetime],
    *,
    reason: str | None = None,
    zone: tzinfo = UTC,
) -> None:
    """`schedule` skipped exactly the nominal times `at` (each for `reason`, if given)."""
    expected = [aware(when, f"at[{i}]") for i, when in enumerate(at)]
    skips = history.skipped(scheduler, schedule)
    actual = [skip.nominal for skip in skips]
    if actual != expected:
        title = f"schedule {schedule!r} did not skip the expected nominal times:"
        raise AssertionError(_difference(title, expected, actual, zone))
    other = [skip for skip in skips if reason is not None and skip.reason != reason]
    if other:
        listed = "".join(f"\n    {show(s.nominal, zone)}: {s.reason}" for s in other[:SHOWN])
        raise AssertionError(
            f"schedule {schedule!r} skipped {len(other)} of those times for another reason "
            f"than {reason!r}:{listed}"
        )


def _attempt_lines(scheduler: Scheduler, work_id: str, zone: tzinfo) -> str:
    found = history.attempts(scheduler, work_id)
    if not found:
        return " none"
    return "".join(
        f"\n    #{a.number}: {a.outcome or 'not ended'}"
        + (f" ({a.error_code})" if a.error_code else "")
        + (f", started {show(a.started_at, zone)}" if a.started_at else "")
        for a in found
    )


def assert_retried(
    scheduler: Scheduler, work_id: str, after: Sequence[timedelta], *, zone: tzinfo = UTC
) -> None:
    """The Work's retries started exactly `after` its failures, in order
    (`history.retried_after`)."""
    for index, delay in enumerate(after):
        if not isinstance(delay, timedelta):
            raise TypeError(f"after[{index}] must be a timedelta, not {delay!r}")
    actual = history.retried_after(scheduler, work_id)
    if actual != list(after):
        armed = history.retries(scheduler, work_id)
        timers = (
            "".join(
                f"\n    after #{r.after_attempt}: failed {show(r.failed_at, zone)}, due "
                f"{show(r.due_at, zone)} (delay {r.delay}), "
                + (f"started {show(r.started_at, zone)}" if r.started_at else "not started")
                for r in armed
            )
            or " none"
        )
        raise AssertionError(
            f"Work {work_id!r} was retried after {[str(d) for d in actual]}, expected "
            f"{[str(d) for d in after]}\n  retry timers:{timers}\n  attempts:"
            f"{_attempt_lines(scheduler, work_id, zone)}"
        )


def assert_held_by_budget(
    scheduler: Scheduler,
    work_id: str,
    *,
    budget: str | None = None,
    window: str | None = None,
    released: bool | None = None,
    zone: tzinfo = UTC,
) -> BudgetHold:
    """A budget held the Work's start (that `budget`, in that `window`; still held with
    `released=False`, released with `released=True`); returns the last such hold."""
    holds = history.held_by_budget(scheduler, work_id)
    matching = [
        hold
        for hold in holds
        if (budget is None or hold.budget == budget)
        and (window is None or hold.window == window)
        and (released is None or (hold.released_at is not None) == released)
    ]
    if matching:
        return matching[-1]
    wanted = ", ".join(
        f"{name} {value!r}"
        for name, value in (("budget", budget), ("window", window), ("released", released))
        if value is not None
    )
    listed = (
        "".join(
            f"\n    {show(h.at, zone)}: {h.reason}"
            + (f"; released {show(h.released_at, zone)}" if h.released_at else "; still held")
            for h in holds
        )
        or " none"
    )
    raise AssertionError(
        f"Work {work_id!r} was not held by a budget{' (' + wanted + ')' if wanted else ''}"
        f"\n  budget holds:{listed}\n  attempts:{_attempt_lines(scheduler, work_id, zone)}"
    )


__all__ = [
    "assert_fired",
    "assert_held_by_budget",
    "assert_retried",
    "assert_skipped",
    "aware",
    "show",
]
