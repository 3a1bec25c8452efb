"""Launch acknowledgement (seed 001, "Recovery and relaunch"): an executor that declares
`recover` must persist its recovery metadata before `launch` returns. A launch that does
not, or that fails ambiguously, is a safe failure that keeps its capacity slot until a
stop is verified: the slot is never freed on the executor's word."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.application.errors import ExecutorError
from rota.infrastructure.clock import ManualClock


class Forgetful(rota.Executor):
    """Declares `recover`, starts its work, and returns without persisting any metadata."""

    name = "forgetful"
    pool = "agents"
    capabilities = frozenset({"recover", "stop"})
    inline = True

    def __init__(self, raises: BaseException | None = None, persists: bool = False) -> None:
        self.raises = raises
        self.persists = persists
        self.stop_asked = threading.Event()
        self.may_stop = threading.Event()

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        if self.persists:
            ctx.persist_recovery({"pid": 4242})
        if self.raises is not None:
            raise self.raises
        if self.persists:
            done(rota.Result(data="ran"))

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> Any:
        self.stop_asked.set()
        self.may_stop.wait(30)
        return "stopped"


@pytest.fixture
def scheduler() -> Iterator[rota.Scheduler]:
    clock = ManualClock(datetime(2026, 8, 1, 9, tzinfo=UTC))
    config = {"settings": {"concurrency": 1}}
    with rota.open("memory://", clock=clock, config=config) as s:
        yield s


def _in_use(scheduler: rota.Scheduler) -> int:
    return int(scheduler.capacity()["pools"]["agents"]["in_use"])


def _attempt(scheduler: rota.Scheduler, work_id: str) -> rota.AttemptView:
    work = scheduler.work(work_id)
    assert work is not None
    return work.attempts[-1]


@pytest.mark.parametrize(
    ("executor", "code"),
    [
        (Forgetful(), "launch_unacknowledged"),
        (Forgetful(raises=RuntimeError("transport broke mid-launch")), "launch_ambiguous"),
    ],
    ids=["returned-without-persisting", "ambiguous-exception"],
)
def test_an_unacknowledged_launch_fails_safely_and_keeps_its_slot_until_stop_is_verified(
    scheduler: rota.Scheduler, executor: Forgetful, code: str
) -> None:
    scheduler.register("forgetful", executor=executor)
    scheduler.register("other", lambda ctx: "ok")
    scheduler.submit("w", binding="forgetful")
    scheduler.tick()  # claim, launch (inline), the safe failure is queued
    scheduler.tick()  # the failure is recorded; the stop check starts and blocks
    attempt = _attempt(scheduler, "w")
    assert (attempt.outcome, attempt.error.code) == ("failed", code)
    assert executor.stop_asked.wait(10)
    scheduler.submit("next", binding="other")
    assert scheduler.tick().started == 0  # concurrency 1: the slot is still held
    assert _in_use(scheduler) == 1
    executor.may_stop.set()  # the executor verifies nothing of the attempt runs
    scheduler.run_until_idle(timeout=10)
    assert _in_use(scheduler) == 0
    next_work = scheduler.work("next")
    assert next_work is not None and next_work.state == "completed"


def test_negative_controls_a_definite_refusal_or_an_acknowledged_launch_frees_the_slot(
    scheduler: rota.Scheduler,
) -> None:
    refusing = Forgetful(raises=ExecutorError("the image does not exist"))
    refusing.name = "refusing"
    acknowledged = Forgetful(persists=True)
    acknowledged.name = "acknowledged"
    scheduler.register("refusing", executor=refusing)
    scheduler.register("acknowledged", executor=acknowledged)
    scheduler.submit("r", binding="refusing")
    scheduler.run_until_idle(timeout=10)
    assert _attempt(scheduler, "r").error.code == "executor_error"
    assert _in_use(scheduler) == 0  # ExecutorError: nothing started, the slot is free
    scheduler.submit("a", binding="acknowledged")
    scheduler.run_until_idle(timeout=10)
    assert _attempt(scheduler, "a").outcome == "completed"
    assert not refusing.stop_asked.is_set() and not acknowledged.stop_asked.is_set()


def test_an_executor_without_recover_owes_no_acknowledgement(scheduler: rota.Scheduler) -> None:
    scheduler.register("plain", lambda ctx: "ok")  # in-process: no `recover` capability
    scheduler.submit("p", binding="plain")
    scheduler.run_until_idle(timeout=10)
    assert _attempt(scheduler, "p").outcome == "completed"
