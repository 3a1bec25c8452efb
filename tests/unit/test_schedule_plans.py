"""The runner's pure decision: catch-up (none, latest, all, max_catchup), overlap policies,
paused, jitter, and every due nominal time accounted for exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rota.domain.events.schedule import ScheduleDefined
from rota.domain.schedule_plans import BUFFER_LIMIT, NONE_GRACE, Busy, Plan, plan
from rota.domain.schedule_specs import EPOCH, define, times_between

T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)
EVERY_MINUTE = define(every="1m")


def definition(**changes: Any) -> ScheduleDefined:
    fields: dict[str, Any] = {
        "name": "tick",
        "schedule_version": 1,
        "spec": "every 1m",
        "binding": "job",
        "anchor": EPOCH,
        "since": T0,
    }
    fields.update(changes)
    return ScheduleDefined(**fields)


def covered(p: Plan) -> list[datetime]:
    times = [f.nominal for f in p.fires]
    for s in p.skips:
        times.extend(times_between(EVERY_MINUTE, EPOCH, s.first - timedelta(seconds=1), s.last))
    return sorted(times)


def test_nothing_is_due_before_the_first_nominal_time() -> None:
    p = plan(definition(), EVERY_MINUTE, boundary=T0, now=T0 + timedelta(seconds=59), busy=Busy())
    assert p.fires == [] and p.skips == [] and p.boundary == T0
    assert p.next_due == T0 + timedelta(minutes=1)


def test_latest_fires_the_newest_in_the_window_and_records_the_rest() -> None:
    now = T0 + timedelta(hours=3, seconds=5)  # 180 nominal times due; the window is 1 h
    p = plan(definition(), EVERY_MINUTE, boundary=T0, now=now, busy=Busy())
    assert [f.nominal for f in p.fires] == [T0 + timedelta(hours=3)]
    reasons = [(s.reason, s.count) for s in p.skips]
    assert reasons == [("outside_catchup_window", 120), ("coalesced", 59)]
    assert covered(p) == [T0 + timedelta(minutes=m) for m in range(1, 181)]
    assert p.boundary == T0 + timedelta(hours=3)


def test_all_fires_every_time_in_the_window_up_to_max_catchup() -> None:
    now = T0 + timedelta(minutes=30)
    d = definition(catchup="all", max_catchup=10, overlap="allow_all")
    p = plan(d, EVERY_MINUTE, boundary=T0, now=now, busy=Busy())
    assert [f.nominal for f in p.fires] == [T0 + timedelta(minutes=m) for m in range(21, 31)]
    assert [(s.reason, s.count) for s in p.skips] == [("coalesced", 20)]


def test_none_fires_only_what_is_on_time() -> None:
    d = definition(catchup="none")
    late = plan(d, EVERY_MINUTE, boundary=T0, now=T0 + timedelta(minutes=10), busy=Busy())
    assert [f.nominal for f in late.fires] == [T0 + timedelta(minutes=10)]  # on time
    # 09:09 is exactly one grace late: inside it, but `none` fires only the newest.
    assert [(s.reason, s.count) for s in late.skips] == [
        ("outside_catchup_window", 8),
        ("coalesced", 1),
    ]
    five = definition(catchup="none", spec="every 5m")
    later = T0 + timedelta(minutes=5) + NONE_GRACE + timedelta(seconds=1)
    missed = plan(five, define(every="5m"), boundary=T0, now=later, busy=Busy())
    assert missed.fires == [] and [(s.reason, s.count) for s in missed.skips] == [
        ("outside_catchup_window", 1)
    ]


def test_overlap_policies() -> None:
    now = T0 + timedelta(minutes=3)
    running = Busy(pending=0, running=True)
    pending = Busy(pending=1, running=True)

    def fired(overlap: str, busy: Busy, catchup: str = "all") -> int:
        d = definition(overlap=overlap, catchup=catchup)
        return len(plan(d, EVERY_MINUTE, boundary=T0, now=now, busy=busy).fires)

    assert fired("skip", Busy()) == 1  # the first; the next two overlap it
    assert fired("skip", running) == 0
    assert fired("buffer_one", running) == 1
    assert fired("buffer_one", pending) == 0
    assert fired("buffer_all", pending) == 3
    assert fired("buffer_all", Busy(pending=BUFFER_LIMIT - 1)) == 1  # bounded
    assert fired("allow_all", pending) == 3
    d = definition(overlap="cancel_other", catchup="latest")
    (fire,) = plan(d, EVERY_MINUTE, boundary=T0, now=now, busy=running).fires
    assert fire.cancel_running
    skipped = plan(definition(), EVERY_MINUTE, boundary=T0, now=now, busy=running).skips
    assert [(s.reason, s.count) for s in skipped] == [("coalesced", 2), ("overlap", 1)]


def test_cancel_other_interrupts_the_running_attempt_once_per_plan() -> None:
    # A catch-up of three due times under cancel_other: the first fire interrupts the
    # running attempt; the later ones find it interrupted already (found by the simulator:
    # two interrupts of one attempt in one append).
    d = definition(overlap="cancel_other", catchup="all")
    now = T0 + timedelta(minutes=3)
    fires = plan(d, EVERY_MINUTE, boundary=T0, now=now, busy=Busy(running=True)).fires
    assert [f.cancel_running for f in fires] == [True, False, False]
    idle = plan(d, EVERY_MINUTE, boundary=T0, now=now, busy=Busy()).fires
    assert [f.cancel_running for f in idle] == [False, False, False]


def test_paused_skips_every_due_time() -> None:
    p = plan(
        definition(),
        EVERY_MINUTE,
        boundary=T0,
        now=T0 + timedelta(minutes=5),
        busy=Busy(),
        paused=True,
    )
    assert p.fires == [] and [(s.reason, s.count) for s in p.skips] == [("paused", 5)]


def test_jitter_delays_the_due_time_deterministically() -> None:
    d = definition(jitter_seconds=30)
    first = plan(
        d, EVERY_MINUTE, boundary=T0, now=T0 + timedelta(minutes=1, seconds=30), busy=Busy()
    )
    again = plan(
        d, EVERY_MINUTE, boundary=T0, now=T0 + timedelta(minutes=1, seconds=30), busy=Busy()
    )
    assert first == again and len(first.fires) == 1
    (fire,) = first.fires
    assert fire.nominal == T0 + timedelta(minutes=1) and fire.due >= fire.nominal
    early = plan(
        d, EVERY_MINUTE, boundary=T0, now=fire.due - timedelta(microseconds=1), busy=Busy()
    )
    assert early.fires == [] and early.next_due == fire.due


def test_the_clock_going_back_fires_nothing_again() -> None:
    p = plan(definition(), EVERY_MINUTE, boundary=T0 + timedelta(hours=2), now=T0, busy=Busy())
    assert p.fires == [] and p.skips == [] and p.boundary == T0 + timedelta(hours=2)


def test_a_time_a_backfill_fired_is_never_skipped_as_well_outside_the_window_or_paused() -> None:
    """Simulator seed 12 (issue 30's flow workload): a backfill fired 05:45, then the
    runner, past the catch-up window, recorded 05:45 skipped: one time fired and skipped."""
    now = T0 + timedelta(hours=3, seconds=5)  # 09:01 .. 12:00 due; the window is 1 h
    backfilled = frozenset({T0 + timedelta(minutes=5), T0 + timedelta(hours=2, minutes=30)})
    p = plan(definition(), EVERY_MINUTE, boundary=T0, now=now, busy=Busy(), fired=backfilled)
    skipped = covered(Plan([], p.skips, p.boundary, None))
    assert not backfilled & set(skipped)
    assert [(s.reason, s.count) for s in p.skips] == [
        ("outside_catchup_window", 4),  # 09:01 .. 09:04
        ("outside_catchup_window", 115),  # 09:06 .. 11:00 (09:05 fired by the backfill)
        ("coalesced", 29),  # 11:01 .. 11:29
        ("coalesced", 29),  # 11:31 .. 11:59 (11:30 fired by the backfill)
    ]
    assert sorted([*skipped, *backfilled, *(f.nominal for f in p.fires)]) == covered(
        plan(definition(), EVERY_MINUTE, boundary=T0, now=now, busy=Busy())
    )
    paused = plan(
        definition(), EVERY_MINUTE, boundary=T0, now=now, busy=Busy(), paused=True,
        fired=backfilled,
    )  # fmt: skip
    assert not backfilled & set(covered(paused))
    assert sum(s.count for s in paused.skips) == 180 - 2
