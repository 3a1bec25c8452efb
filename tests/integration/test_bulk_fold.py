"""A rebuild's bulk fold (`fold_page`: runs of lease renewals folded as one, indices derived
once at the end) equals applying the log event by event, however the log is paged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rota.application.service import SchedulerService
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.stores import open_store

from .test_projection_property import (
    _bulk_fold,
    _fold,
    _history_by_event,
    _same_indices,
    _service_on,
)

WORKS = ["a", "b", "c"]


def running(service: SchedulerService) -> dict[str, tuple[str, int]]:
    """Each Work's live attempt (execution id, epoch)."""
    found = {}
    for work_id in WORKS:
        work = service.projection.works.get(work_id)
        current = work.current if work is not None else None
        if current is not None and current.live and not current.released:
            found[work_id] = (current.execution_id, current.epoch)
    return found


def invoke_new(service: SchedulerService) -> None:
    """Invoke the attempts claimed but not yet invoked."""
    for work_id, (execution, epoch) in running(service).items():
        segment = service.projection.works[work_id].current.open_segment  # type: ignore[union-attr]
        if segment is not None and segment.invoke == "pending":
            service.lifecycle.invoke(execution, epoch)


def renewal_heavy_log() -> SchedulerService:
    """Runs of renewals of several attempts, broken by other events of the same Works
    (input, an outcome, a new attempt) and of others, across many recorded times."""
    clock = ManualClock(datetime(2026, 7, 1, tzinfo=UTC))
    service = _service_on(open_store("memory://", clock=clock))
    for work_id in WORKS[:2]:
        service.lifecycle.submit(
            SubmitWork(
                work_id=work_id, binding="b", kind="standing", inputs=(WorkInput(None, "s"),)
            )
        )
    service.lifecycle.start_pass(2)
    invoke_new(service)
    for round_ in range(6):
        for _ in range(3):
            clock.advance(5)
            for execution, epoch in running(service).values():
                service.lifecycle.renew(execution, epoch)
        if round_ == 1:
            service.lifecycle.accept("a", {"n": round_}, key=f"k{round_}", correlation_key="c")
        if round_ == 2:  # an attempt ends between runs of renewals; the Work's next starts
            execution, epoch = running(service)["a"]
            service.lifecycle.finish(execution, epoch, Result())
            service.lifecycle.start_pass(2)
            invoke_new(service)
            assert running(service)["a"][0] == "a/2"
        if round_ == 3:
            service.lifecycle.submit(
                SubmitWork(
                    work_id="c", binding="b", kind="standing", inputs=(WorkInput(None, "s"),)
                )
            )
        if round_ == 4:
            execution, epoch = running(service)["b"]
            service.lifecycle.release(execution, epoch)
    return service


@pytest.mark.parametrize("page", [1, 2, 3, 5, 8, 1000])
def test_the_bulk_fold_equals_the_fold_event_by_event(page: int) -> None:
    service = renewal_heavy_log()
    try:
        renewals = sum(
            1 for r in service.store.read(0, 10_000) if r.type == "core.execution.renewed"
        )
        assert renewals >= 30, "the log should be mostly runs of renewals"
        by_event = _fold(service)
        assert by_event.digest() == service.projection.digest()
        bulk, history = _bulk_fold(service, page)
        assert bulk.digest() == by_event.digest()
        _same_indices(bulk, service.projection)
        assert history == _history_by_event(service)
    finally:
        service.store.close()


def test_a_scheduler_opening_with_nothing_stored_folds_in_bulk() -> None:
    """`catch_up` from position 0 folds as a rebuild does and ends with the live indices."""
    service = renewal_heavy_log()
    try:
        fresh = SchedulerService(
            service.store,
            settings=service.settings,
            owner="second",
            bindings=service.bindings,
            registrations=service.registrations,
        )
        calls: list[int] = []
        apply = fresh.projection.apply
        fresh.projection.apply = lambda *a: calls.append(1) or apply(*a)  # type: ignore[method-assign]
        assert fresh.catch_up() == service.store.head().position
        assert calls == []  # nothing applied event by event
        assert fresh.projection.digest() == service.projection.digest()
        _same_indices(fresh.projection, service.projection)
    finally:
        service.store.close()
