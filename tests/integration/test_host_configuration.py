"""The configuration commands the facade calls instead of reaching into the host's executor
directory or the service's lock (tests/unit/test_read_side.py): `Host.keep_generation`,
`Host.serve_historical`, `Host.declare_compatible`, `Host.register_gate` and
`SchedulerService.configuring`."""

from __future__ import annotations

import threading

import rota


def test_a_kept_generation_and_a_historical_executor_serve_their_attempts() -> None:
    with rota.open("memory://") as scheduler:
        scheduler.register("job", lambda ctx: "old")
        host, service = scheduler.host, scheduler.service
        before, old = service.generation, host.executors["job"]
        assert not old.stable
        host.keep_generation(before, {"job": old})
        assert host.historical[(before, "job")] is old
        scheduler.register("other", lambda ctx: "other")
        other = host.executors["other"]
        host.serve_historical("g-older", "job", other)
        assert host.historical[("g-older", "job")] is other
        host.declare_compatible({"g-compatible": frozenset({"job"})})
        assert host.directory.compatible["g-compatible"] == frozenset({"job"})


def test_configuring_holds_off_every_other_holder_of_the_service_lock() -> None:
    with rota.open("memory://") as scheduler:
        service = scheduler.service
        got: list[bool] = []

        def other() -> None:
            acquired = service.lock.acquire(blocking=False)
            if acquired:
                service.lock.release()
            got.append(acquired)

        with service.configuring():
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert got == [False, True]


def test_a_gate_registered_through_the_host_is_asked() -> None:
    with rota.open("memory://") as scheduler:
        asked: list[str] = []

        def gate(work: rota.WorkState, binding: rota.Binding, first: object) -> None:
            asked.append(work.work_id)

        scheduler.register("job", lambda ctx: "done")
        scheduler.host.register_gate("audit", gate)
        assert scheduler.host.gates["audit"] is gate
        scheduler.submit("w", binding="job")
        scheduler.run_until_idle(timeout=30)
        assert asked == ["w"]
