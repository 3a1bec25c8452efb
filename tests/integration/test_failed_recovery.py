"""A failed recovery is stopped and confirmed, not recovered again every lease for ever;
repeated failed recoveries of one Work hold it (`recovery_exhausted`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.replay.explain import explain


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 12, 1, 9, tzinfo=UTC))


class Unrecoverable(rota.Executor):
    """Launches nothing of its own here; its recovery never finds evidence (it answers
    `unknown`, or raises), and its stop verifies that nothing runs."""

    capabilities = frozenset({"stop", "recover"})

    def __init__(self, name: str = "job", *, raises: bool = False) -> None:
        self.name = name
        self.raises = raises
        self.recovered: list[tuple[str, int]] = []
        self.stopped: list[tuple[str, int]] = []

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        ctx.persist_recovery({"where": "elsewhere"})

    def recover(self, ctx: rota.LaunchContext, metadata: Any, done: Any) -> Any:
        self.recovered.append((ctx.execution_id, ctx.epoch))
        if self.raises:
            raise RuntimeError("the executor's agent is unreachable")
        return "unknown"

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> Any:
        self.stopped.append((execution_id, epoch))
        return "stopped"


def crashed_elsewhere(url: str, clock: ManualClock, work: str = "w", **submit: Any) -> None:
    """A host on another machine claims and invokes `work`, then dies holding its lease."""
    with rota.open(url, clock=clock, owner="elsewhere:1:x") as other:
        other.register("job", executor=Unrecoverable())
        other.submit(work, binding="job", **submit)
        claimed = other.service.lifecycle.start_pass().claimed[0]
        other.service.lifecycle.invoke(claimed.attempt.execution_id, claimed.attempt.epoch)
        other.host.held.clear()  # it dies: nothing is released


def until(scheduler: rota.Scheduler, done: Callable[[], bool]) -> None:
    """Tick until `done()` (what the launcher does off the loop, recover and stop, wakes
    the host when it is through)."""
    for _ in range(200):
        scheduler.tick()
        if done():
            return
        scheduler.host.wake.wait(0.05)
        scheduler.host.wake.clear()
    raise AssertionError("the condition never held")


def types(scheduler: rota.Scheduler, work: str = "w") -> list[str]:
    return [e.type for e in scheduler.events() if e.stream == f"work/{work}"]


@pytest.fixture
def store(tmp_path: Any) -> Iterator[str]:
    yield f"sqlite:///{tmp_path}/failed-recovery.db"


@pytest.mark.parametrize("raises", [False, True], ids=["unknown", "raises"])
def test_a_failed_recovery_is_stopped_and_confirmed_not_recovered_every_lease(
    store: str, clock: ManualClock, raises: bool
) -> None:
    crashed_elsewhere(store, clock)
    executor = Unrecoverable(raises=raises)
    with rota.open(store, clock=clock, owner="host-a") as scheduler:
        scheduler.register("job", executor=executor)
        clock.advance(61)
        until(scheduler, lambda: "core.execution.stop_confirmed" in types(scheduler))
        for _ in range(5):  # five more lease periods, each a chance to recover again
            clock.advance(61)
            scheduler.tick()
        recovered = [t for t in types(scheduler) if t == "core.execution.recovered"]
        assert len(recovered) == 1, "recovered again after a failed recovery"
        assert executor.recovered == [("w/1", 2)]
        assert executor.stopped[:1] == [("w/1", 2)]
        view = scheduler.work("w")
        assert view is not None
        first = view.attempts[0]
        assert first.outcome == "failed" and first.epoch == 2
        assert first.error is not None and first.error.code == "recovery_failed"
        assert first.stop_confirmed
        kinds = types(scheduler)
        failed = kinds.index("core.execution.failed")
        assert kinds[failed - 1] == "core.execution.recovery_failed"
        assert "core.execution.stop_confirmed" in kinds[failed:]


def test_the_ceiling_holds_the_work_with_its_reason_until_released(
    store: str, clock: ManualClock
) -> None:
    crashed_elsewhere(store, clock)
    executor = Unrecoverable()
    config = {"settings": {"recovery_failure_limit": 1}}
    with rota.open(store, clock=clock, owner="host-a", config=config) as scheduler:
        scheduler.register("job", executor=executor)
        clock.advance(61)
        until(scheduler, lambda: "core.work.held" in types(scheduler))
        view = scheduler.work("w")
        assert view is not None and view.state == "held"
        (hold,) = view.holds
        assert hold.kind == "recovery_exhausted"
        assert "recovery failed 1 times in a row" in hold.reason
        until(scheduler, lambda: "core.execution.stop_confirmed" in types(scheduler))
        for _ in range(3):  # held: neither recovered again nor started
            clock.advance(400)
            scheduler.tick()
        assert types(scheduler).count("core.execution.recovered") == 1
        assert len(scheduler.work("w").attempts) == 1  # type: ignore[union-attr]
        # explain says why, citing the hold and the failed recovery behind it.
        why = explain(scheduler.store, "w")
        (held,) = [s for s in why.statements if s.kind == "held:recovery_exhausted"]
        failed = [e.position for e in scheduler.events() if e.type == "core.execution.failed"]
        assert "rota release w" in held.text and failed[-1] in held.positions
        scheduler.release("w")
        view = scheduler.work("w")
        assert view is not None and view.state != "held"
