"""A daemon whose store takes no writes (issue 32, item 2): it says so once per change of
state, runs no pass (no claim, no launch) while it lasts, probes the store instead, and
goes on by itself once the store is writable again; `/readyz` and `/metrics` read it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

import rota
from rota.application.ports import StoreState
from rota.application.ports.records import WRITABLE
from rota.store_health import StoreHealth

READ_ONLY = StoreState("store_read_only", "the server is read-only")


class FakeStore:
    """What StoreHealth reads of a store: its state, and a probe that answers in turn."""

    def __init__(self, answers: list[StoreState]) -> None:
        self.found = WRITABLE
        self.answers = answers
        self.probed = 0

    def state(self) -> StoreState:
        return self.found

    def probe(self) -> StoreState:
        self.probed += 1
        self.found = self.answers.pop(0) if self.answers else self.found
        return self.found


def test_one_line_per_change_and_probes_until_writable(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore([READ_ONLY, StoreState("store_read_only", "still"), WRITABLE])
    health = StoreHealth(store)  # type: ignore[arg-type]
    caplog.set_level(logging.INFO, logger="rota.store")
    assert health.observe() is False
    store.found = READ_ONLY
    assert health.observe() is True
    assert health.observe() is True  # the same state: nothing more said
    health.wait_until_writable(threading.Event())
    assert health.writable and store.probed == 3 and health.changes == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "rota.store"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("store not writable: store_read_only: the server is read-only")
    assert "holding launches" in lines[0]
    assert lines[1].startswith("store writable again after")
    assert health.unwritable_seconds() > 0


def test_a_stop_ends_the_probing() -> None:
    store = FakeStore([])
    store.found = READ_ONLY
    health = StoreHealth(store)  # type: ignore[arg-type]
    health.observe()
    stop = threading.Event()
    stop.set()
    health.wait_until_writable(stop)
    assert not health.writable and store.probed == 0


@pytest.fixture
def scheduler(memory_url: str) -> Iterator[rota.Scheduler]:
    with rota.open(memory_url, config={"settings": {"lease_seconds": 30}}) as opened:
        yield opened


def test_the_loop_starts_nothing_while_the_store_takes_no_writes(
    scheduler: rota.Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = threading.Event()
    scheduler.register("job", lambda ctx: ran.set())
    state = {"now": WRITABLE}
    probed = threading.Event()

    def probe() -> StoreState:
        probed.set()
        return state["now"]

    monkeypatch.setattr(scheduler.store, "state", lambda: state["now"])
    monkeypatch.setattr(scheduler.store, "probe", probe)
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    loop.start()
    try:
        state["now"] = READ_ONLY
        scheduler.host.wake.set()  # a pass, which finds the store not writable
        assert probed.wait(10), "the loop never probed the store"
        passes = scheduler.daemon.passes.passes
        scheduler.submit("w", binding="job")
        assert not ran.wait(0.5), "a Work started while the store took no writes"
        assert scheduler.daemon.passes.passes == passes  # no pass ran meanwhile
        assert not scheduler.daemon.health.writable
        state["now"] = WRITABLE
        assert ran.wait(10), "the Work never started once the store was writable again"
    finally:
        stop.set()
        loop.join(10)
    assert scheduler.daemon.health.changes == 2


def test_outcomes_a_failed_append_could_not_record_are_kept_for_the_next_pass(
    scheduler: rota.Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    import queue

    from rota.application.errors import StoreUnavailable
    from rota.application.host_steps import finish_or_keep
    from rota.domain.results import Result

    results: queue.SimpleQueue[tuple[str, int, Result]] = queue.SimpleQueue()
    waiting = ("c/1", 1, Result(data="c"))
    results.put(waiting)
    batch = [("a/1", 1, Result(data="a")), ("b/1", 1, Result(data="b"))]

    def down(items: object) -> None:
        raise StoreUnavailable("the server is gone")

    monkeypatch.setattr(scheduler.service.lifecycle, "finish_many", down)
    with pytest.raises(StoreUnavailable):
        finish_or_keep(scheduler.service, results, batch)
    kept = [results.get_nowait() for _ in range(3)]
    assert kept == [*batch, waiting] and results.empty()  # the batch first, then the rest
