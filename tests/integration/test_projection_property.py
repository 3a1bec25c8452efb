"""Property: for random command sequences, the live scheduler projection equals a fold of
the log from position 0 (the projection reads time only from events and never appends)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trial_scale import scale

from rota.application.ports import EventStore
from rota.application.service import SchedulerService
from rota.application.timestamps import parse_timestamp
from rota.domain.errors import RotaError
from rota.domain.events.admission import Budget
from rota.domain.policy import Binding, Registration, RetryPolicy, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import SchedulerProjection

WORKS = ["a", "b", "c", "d"]
RESULTS = [
    Result(),
    Result(outcome="failed", error_code="boom"),
    Result(outcome="failed", permanent=True),
    Result(outcome="waiting"),
    Result(outcome="handoff"),
    Result(data={"core.turn.v1": {"status": "review"}}),
    Result(outcome="failed", retry_unknown=True),
    Result(usage={"usd": 2.5, "tokens": 100.0}),
    Result(outcome="failed", usage={"usd": 1.0}),
]
BUDGETS = [
    Budget(id="turns-per-work", unit="turns", max=3, per="work", warn_at=0.5),
    Budget(id="usd-all", unit="usd", max=6, per="all", period="day"),
    Budget(id="team-tokens", unit="tokens", max=250, per="scope", scope="root"),
]

command = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(WORKS), st.sampled_from(["run-once", "standing"])),
    st.tuples(st.just("accept"), st.sampled_from(WORKS), st.integers(0, 3)),
    st.tuples(st.just("start"), st.integers(1, 4)),
    st.tuples(st.just("invoke"), st.sampled_from(WORKS)),
    st.tuples(st.just("finish"), st.sampled_from(WORKS), st.integers(0, len(RESULTS) - 1)),
    st.tuples(st.just("renew"), st.sampled_from(WORKS)),
    st.tuples(st.just("advance"), st.sampled_from([1, 20, 61, 400, 2000])),
    st.tuples(st.just("timeout"), st.sampled_from(WORKS)),
    st.tuples(st.just("confirm"), st.sampled_from(WORKS)),
    st.tuples(
        st.just("fire"),
    ),
    st.tuples(st.just("release"), st.sampled_from(WORKS)),
    st.tuples(
        st.just("settle"),
    ),
    st.tuples(st.just("unhold"), st.sampled_from(WORKS)),
)


def _service(path: Path, clock: ManualClock) -> SchedulerService:
    """On an SQLite file (the tests of projection stores and rebuilds beside it)."""
    return _service_on(SQLiteStore(path, clock=clock, synchronous="normal"))


def _service_on(store: EventStore) -> SchedulerService:
    service = SchedulerService(
        store,
        settings=Settings(concurrency=2, lease_seconds=60, timeout_seconds=300),
        owner="prop",
        bindings={"b": Binding(name="b", executor="x", retry=RetryPolicy(max_attempts=3))},
        registrations={"x": Registration(name="x")},
    )
    service.admission.configure_budgets(BUDGETS)
    return service


def _run(service: SchedulerService, clock: ManualClock, step: tuple[object, ...]) -> None:
    kind = step[0]
    projection = service.projection

    def current(work_id: object) -> tuple[str, int] | None:
        work = projection.works.get(str(work_id))
        if work is None or work.current is None:
            return None
        return work.current.execution_id, work.current.epoch

    try:
        if kind == "submit":
            service.lifecycle.submit(
                SubmitWork(
                    work_id=str(step[1]),
                    binding="b",
                    kind=str(step[2]),
                    inputs=(WorkInput(None, "s"),),
                )
            )
        elif kind == "accept":
            service.lifecycle.accept(
                str(step[1]), {"n": step[2]}, key=f"k{step[2]}", correlation_key="c"
            )
        elif kind == "start":
            service.lifecycle.start_pass(int(step[1]))  # type: ignore[call-overload]
        elif kind == "advance":
            clock.advance(float(step[1]))  # type: ignore[arg-type]
        elif kind == "fire":
            service.lifecycle.fire_due_timers()
        elif kind == "settle":
            service.admission.settle_pass()
        elif kind == "unhold":
            service.recovery.release_hold(str(step[1]))
        elif (found := current(step[1])) is not None:
            execution, epoch = found
            if kind == "invoke":
                service.lifecycle.invoke(execution, epoch)
            elif kind == "finish":
                service.lifecycle.finish(execution, epoch, RESULTS[int(step[2])])  # type: ignore[call-overload]
            elif kind == "renew":
                service.lifecycle.renew(execution, epoch)
            elif kind == "timeout":
                service.lifecycle.time_out(execution, epoch)
            elif kind == "confirm":
                service.lifecycle.confirm_stopped(execution, epoch)
            elif kind == "release":
                service.lifecycle.release(execution, epoch)
    except RotaError:
        pass


def _fold(service: SchedulerService) -> SchedulerProjection:
    fresh = SchedulerProjection()
    position = 0
    while batch := service.store.read(position, 1000):
        for r in batch:
            fresh.apply(r.position, r.stream, r.version, parse_timestamp(r.recorded_at), r.event)
        position = batch[-1].position
    return fresh


def _bulk_fold(service: SchedulerService, page: int) -> tuple[SchedulerProjection, str]:
    """The scheduler and history projections folded as a rebuild folds them (`fold_page` on
    pages of `page` events, then `settle`); the scheduler and the history's digest."""
    records = service.store.read(0, 100_000)
    times = [parse_timestamp(r.recorded_at) for r in records]
    scheduler, history = SchedulerProjection(), HistoryProjection()
    for first in range(0, len(records), page):
        for projection in (scheduler, history):
            projection.fold_page(records[first : first + page], times[first : first + page], 10**9)
    scheduler.settle()
    return scheduler, history.digest()


def _history_by_event(service: SchedulerService) -> str:
    history = HistoryProjection()
    for r in service.store.read(0, 100_000):
        history.apply(r.position, r.stream, r.version, parse_timestamp(r.recorded_at), r.event)
    return history.digest()


def _same_indices(left: SchedulerProjection, right: SchedulerProjection) -> None:
    assert left.startable == right.startable
    assert left.live == right.live
    assert left.timers == right.timers
    assert left.slot_scopes == right.slot_scopes
    assert {p: s for p, s in left.slots.items() if s} == {p: s for p, s in right.slots.items() if s}
    assert [w.work_id for w in left.ready_order()] == [w.work_id for w in right.ready_order()]


@settings(
    max_examples=scale(60, 500, "ROTA_EXAMPLES"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(command, min_size=1, max_size=40), st.integers(1, 12))
def test_live_projection_equals_a_fold_from_position_zero(
    steps: list[tuple[object, ...]], page: int
) -> None:
    clock = ManualClock(datetime(2026, 7, 1, tzinfo=UTC))
    service = _service_on(open_store("memory://", clock=clock))
    try:
        for step in steps:
            _run(service, clock, step)
        fresh = _fold(service)
        assert fresh.digest() == service.projection.digest()
        # A rebuild's bulk fold (pages, runs of renewals folded as one, indices derived
        # at the end) gives the same projections as applying event by event.
        bulk, history = _bulk_fold(service, page)
        assert bulk.digest() == fresh.digest()
        _same_indices(bulk, service.projection)
        assert history == _history_by_event(service)
        assert fresh.startable == service.projection.startable
        for pool in set(fresh.slots) | set(service.projection.slots):
            assert fresh.slots.get(pool, set()) == service.projection.slots.get(pool, set())
        for pool, holders in service.projection.slots.items():
            assert len(holders) <= 2, f"pool {pool} over its limit: {holders}"
        assert fresh.ledgers == service.projection.ledgers
    finally:
        service.store.close()
