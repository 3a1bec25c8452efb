"""Control dispatch through the real host: inject, interrupt and cancel with in-process
executors, and the intent states in `work show` (`controls`)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rota


@pytest.fixture
def scheduler(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[rota.Scheduler]:
    """In memory; a test that reads the log's file asks for "sqlite" (indirect)."""
    on_file = getattr(request, "param", "memory") == "sqlite"
    with rota.open(tmp_path / "ctl.db" if on_file else "memory://", owner="ctl") as s:
        yield s


def settle(s: rota.Scheduler, condition: Any, passes: int = 400) -> None:
    for _ in range(passes):
        s.tick()
        if condition():
            return
        s.host.wake.wait(0.05)
        s.host.wake.clear()
    raise AssertionError("the condition never held")


def controls(s: rota.Scheduler, work: str) -> tuple[rota.ControlView, ...]:
    view = s.work(work)
    assert view is not None
    return view.controls


def test_an_injected_input_consumed_by_the_attempt_settles_consumed(
    scheduler: rota.Scheduler,
) -> None:
    def conversation(ctx: rota.LaunchContext) -> rota.Result:
        position, payload = ctx.injected.get(timeout=30)
        return rota.Result(data={"heard": payload}, consumed=[position])

    scheduler.register("talk", conversation)
    scheduler.submit("w", binding="talk")
    settle(scheduler, lambda: scheduler.work("w").state == "running")
    scheduler.inject("w", {"say": "hello"}, key="m1")
    settle(scheduler, lambda: scheduler.work("w").state == "completed")
    (control,) = controls(scheduler, "w")
    assert control.state == "consumed" and control.kind == "inject"
    view = scheduler.work("w")
    assert view is not None and view.pending == ()
    assert view.attempts[0].data == {"heard": {"say": "hello"}}


def test_an_accepted_but_unconsumed_input_runs_the_next_attempt(
    scheduler: rota.Scheduler,
) -> None:
    release = threading.Event()
    seen: list[list[Any]] = []

    def job(ctx: rota.LaunchContext) -> None:
        seen.append(list(ctx.inputs))
        if ctx.attempt == 1:
            assert release.wait(30)

    scheduler.register("job", job)
    scheduler.submit("w", binding="job", input="first")
    settle(scheduler, lambda: scheduler.work("w").state == "running")
    scheduler.inject("w", "second", key="m2")
    settle(scheduler, lambda: controls(scheduler, "w")[0].state == "accepted")
    release.set()
    settle(scheduler, lambda: scheduler.work("w").state == "completed")
    assert seen == [["first"], ["second"]]


class Refusing(rota.Executor):
    """Runs until released; answers injections as told."""

    name = "refusing"
    capabilities = frozenset({"inject", "stop"})

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.release = threading.Event()
        self.calls: queue.SimpleQueue[int] = queue.SimpleQueue()

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        threading.Thread(target=lambda: (self.release.wait(30), done(rota.Result()))).start()

    def inject(self, execution_id: str, epoch: int, position: int, payload: Any) -> str:
        self.calls.put(position)
        answer = self.answer.pop(0) if isinstance(self.answer, list) else self.answer
        if isinstance(answer, BaseException):
            raise answer
        return str(answer)

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> str:
        return "stopped" if self.release.is_set() else "unknown"


@pytest.mark.parametrize(
    ("answer", "state", "kept"),
    [
        ("not_accepting", "not_accepting", True),
        (rota.ExecutorError("provider said: secret-token-123"), "queued", True),
    ],
)
@pytest.mark.parametrize("scheduler", ["sqlite"], indirect=True)  # it reads the log's file
def test_settlements_keep_or_queue_the_input(
    scheduler: rota.Scheduler, answer: Any, state: str, kept: bool
) -> None:
    executor = Refusing(answer)
    scheduler.register("refusing", executor=executor)
    scheduler.submit("w", binding="refusing")
    settle(scheduler, lambda: scheduler.work("w").state == "running")
    scheduler.inject("w", "x", key="m3")
    settle(scheduler, lambda: controls(scheduler, "w")[0].state == state)
    view = scheduler.work("w")
    assert view is not None
    assert ([p.key for p in view.pending] == ["m3"]) is kept
    assert b"secret-token-123" not in (scheduler.store.path.read_bytes())  # type: ignore[attr-defined]
    executor.release.set()


class StableRefusing(Refusing):
    """A `Refusing` that serves attempts pinned under an older generation (`stable`), so a
    redefined binding leaves the running attempt reachable."""

    stable = True


@pytest.mark.parametrize(
    ("pinned", "redefined", "state", "kept"),
    [("drop", "queue", "dropped", False), ("queue", "drop", "queued", True)],
)
def test_a_definite_control_failure_follows_the_fallback_the_attempt_pinned(
    scheduler: rota.Scheduler, pinned: Any, redefined: Any, state: str, kept: bool
) -> None:
    executor = StableRefusing(rota.ExecutorError("provider said no"))
    scheduler.register("refusing", executor=executor, control_fallback=pinned)
    scheduler.submit("w", binding="refusing")
    settle(scheduler, lambda: scheduler.work("w").state == "running")
    scheduler.bind("refusing", executor="refusing", control_fallback=redefined)
    scheduler.inject("w", "x", key="m5")
    settle(scheduler, lambda: controls(scheduler, "w")[0].state in ("queued", "dropped"))
    assert controls(scheduler, "w")[0].state == state
    view = scheduler.work("w")
    assert view is not None
    assert ([p.key for p in view.pending] == ["m5"]) is kept
    (requested,) = [e for e in scheduler.events() if e.type == "core.control.requested"]
    assert requested.data["fallback"] == pinned
    executor.release.set()
    scheduler.submit("next", binding="refusing")  # a new attempt pins the redefined one
    settle(scheduler, lambda: scheduler.work("next").state != "ready")
    fallbacks = {
        e.stream: e.data["pinned"]["binding"]["control_fallback"]
        for e in scheduler.events()
        if e.type == "core.execution.claimed" and e.data["attempt"] == 1
    }
    assert fallbacks == {"work/w": pinned, "work/next": redefined}


def test_a_fallback_that_is_neither_queue_nor_drop_is_refused(scheduler: rota.Scheduler) -> None:
    with pytest.raises(rota.InvalidCommand, match=r"bindings\.b\.control_fallback") as caught:
        scheduler.bind("b", executor="shell", control_fallback="retry")  # type: ignore[arg-type]
    assert caught.value.code == "invalid_config"


def test_an_ambiguous_delivery_is_retried_under_the_same_intent(
    scheduler: rota.Scheduler,
) -> None:
    executor = Refusing([RuntimeError("connection reset"), "accepted"])
    scheduler.register("refusing", executor=executor)
    scheduler.submit("w", binding="refusing")
    settle(scheduler, lambda: scheduler.work("w").state == "running")
    scheduler.inject("w", "x", key="m4")
    settle(scheduler, lambda: controls(scheduler, "w")[0].state == "accepted")
    (control,) = controls(scheduler, "w")
    assert control.dispatches == 2
    executor.release.set()


def test_interrupt_fences_then_stops_and_frees_the_slot(scheduler: rota.Scheduler) -> None:
    def patient(ctx: rota.LaunchContext) -> str:
        return "interrupted" if ctx.cancel.wait(30) else "finished"

    scheduler.register("patient", patient)
    scheduler.submit("w", binding="patient")
    settle(scheduler, lambda: scheduler.work("w").state == "running")
    scheduler.interrupt("w")
    view = scheduler.work("w")
    assert view is not None and view.attempts[0].outcome == "interrupted"
    settle(scheduler, lambda: len(scheduler.work("w").attempts) == 2)
    view = scheduler.work("w")
    assert view is not None
    assert view.attempts[0].stop_confirmed
    # Delivered, or superseded when the fenced call had already stopped on its lost lease.
    assert controls(scheduler, "w")[0].state in {"delivered", "superseded"}
    scheduler.cancel("w")
    settle(scheduler, lambda: scheduler.work("w").attempts[1].stop_confirmed)
    assert scheduler.work("w").state == "cancelled"
