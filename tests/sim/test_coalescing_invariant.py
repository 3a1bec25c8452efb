"""`no_submit_lost_by_debounce` (rota.testing.sim.invariants.coalescing): quiet on a log
rota wrote with debounced and unique submits, and reporting each tampering of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

import rota
from rota.application.ports import RecordedEvent
from rota.domain.events import AttemptClaimed, InputAccepted, SubmitMerged, SubmitSuppressed
from rota.infrastructure.clock import ManualClock
from rota.testing.sim.invariants.coalescing import no_submit_lost_by_debounce


def written() -> list[RecordedEvent]:
    clock = ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))
    with rota.open("memory://", clock=clock, owner="inv") as s:
        s.register("job", lambda ctx: None)
        debounce = rota.Debounce("d", 5)
        for n in range(3):
            s.submit(f"d{n}", binding="job", input=n, debounce=debounce)
            clock.advance(1)
        unique = rota.Unique("u")
        s.submit("u0", binding="job", input="a", unique=unique)
        s.submit("u1", binding="job", input="b", unique=unique)
        clock.advance(10)
        s.run_until_idle(timeout=10)
        s.submit("d9", binding="job", input=9, debounce=debounce)  # a new window
        return s.service.store.read(0, 10_000)


def first(log: list[RecordedEvent], kind: type) -> int:
    return next(i for i, r in enumerate(log) if type(r.event) is kind)


def test_quiet_on_a_log_rota_wrote() -> None:
    log = written()
    assert sum(type(r.event) is SubmitMerged for r in log) == 2
    assert sum(type(r.event) is SubmitSuppressed for r in log) == 1
    assert no_submit_lost_by_debounce(log) == []


def test_reports_a_merge_into_a_work_never_submitted() -> None:
    log = written()
    i = first(log, SubmitMerged)
    event = msgspec.structs.replace(log[i].event, work_id="ghost")  # type: ignore[type-var]
    log[i] = msgspec.structs.replace(log[i], event=event)
    (found,) = no_submit_lost_by_debounce(log)
    assert found.invariant == "no_submit_lost_by_debounce"
    assert "merged into ghost, a Work never submitted" in found.message
    assert found.positions == (log[i].position,)


def test_reports_a_merged_input_the_work_never_accepted() -> None:
    log = written()
    i = first(log, SubmitMerged)
    assert type(log[i - 1].event) is InputAccepted  # accepted in the same append, before it
    del log[i - 1]
    (found,) = no_submit_lost_by_debounce(log)
    assert "is not on it" in found.message


def test_reports_a_merge_after_the_window_started_and_past_max_wait() -> None:
    log = written()
    i = first(log, SubmitMerged)
    claim = log[first(log, AttemptClaimed)]
    log.insert(i, msgspec.structs.replace(claim, position=log[i].position))
    found = no_submit_lost_by_debounce(log)
    assert any("whose window had closed" in v.message for v in found)
    log = written()
    late = log[i].event.not_before + timedelta(days=1)  # type: ignore[attr-defined]
    log[i] = msgspec.structs.replace(
        log[i],
        event=msgspec.structs.replace(log[i].event, not_before=late),  # type: ignore[type-var]
    )
    (found_late,) = no_submit_lost_by_debounce(log)
    assert "past its max_wait" in found_late.message


def test_reports_a_suppression_in_favour_of_a_work_without_the_key() -> None:
    log = written()
    i = first(log, SubmitSuppressed)
    event = msgspec.structs.replace(log[i].event, key="other")  # type: ignore[type-var]
    log[i] = msgspec.structs.replace(log[i], event=event)
    (found,) = no_submit_lost_by_debounce(log)
    assert "holds no unique key 'other'" in found.message
