"""Request ids (issue 28, item 7): every operator command takes a `request_id` that becomes
the delivery identity of the event answering it. A repeat appends nothing and returns the
first receipt, read back from the log: in the same process and after reopening the store
(a restart). The same id for another request is `request_id_reused`; a malformed id is
`invalid_request_id`; neither appends anything."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from postgres import schema_url, temporary_schema

import rota
import rota.aio
from rota.infrastructure.clock import ManualClock

from .cli_process import refused
from .cli_process import rota as cli

T0 = datetime(2026, 11, 2, 10, tzinfo=UTC)
BUDGETS = [{"id": "one-turn", "unit": "turns", "max": 1, "per": "work"}]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "requests.db"


def opened(path: Path, clock: ManualClock, **config: Any) -> rota.Scheduler:
    s = rota.open(path, clock=clock, config=config or None, owner="req")
    s.register("ok", lambda ctx: None, inline=True)
    s.register("fail", fail, inline=True)
    return s


def fail(ctx: Any) -> None:
    raise rota.Fail("no", permanent=True)


def events(s: rota.Scheduler, type_: str) -> list[rota.EventView]:
    return [e for e in s.events() if e.type == type_]


def repeated_after_restart(
    path: Path, clock: ManualClock, first: rota.Receipt, again: Callable[[rota.Scheduler], Any]
) -> None:
    """Reopen the store (a new process's view: no memory of answers) and repeat."""
    with opened(path, clock, budgets=BUDGETS) as s:
        head = s.store.head()
        after = again(s)
        assert s.store.head() == head  # nothing appended
    assert (after.position, after.type, after.delivery_id) == (
        first.position,
        first.type,
        first.delivery_id,
    )
    assert after.repeated and not first.repeated


def test_cancel_is_recorded_once_under_its_request_id(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        s.submit("w", binding="ok", input=1)
        first = s.cancel("w", reason="wrong", by="ada", request_id="cancel-w-1")
        assert first.type == "core.work.cancelled" and first.delivery_id == "request/cancel-w-1"
        head = s.store.head()
        again = s.cancel("w", reason="wrong", by="ada", request_id="cancel-w-1")
        assert s.store.head() == head  # not work_terminal: the first answer
        assert again.repeated and again.position == first.position
        assert len(events(s, "core.work.cancelled")) == 1
        with pytest.raises(rota.Refusal) as plain:
            s.cancel("w", reason="wrong", by="ada")  # no id: the domain's refusal stands
        assert plain.value.code == "work_terminal"
    repeated_after_restart(
        path,
        clock,
        first,
        lambda s: s.cancel("w", reason="wrong", by="ada", request_id="cancel-w-1"),
    )


def test_an_id_reused_for_another_request_is_refused(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        s.submit("a", binding="ok", input=1)
        s.submit("b", binding="ok", input=1)
        s.cancel("a", reason="r", request_id="k-1")
        head = s.store.head()
        others: list[Callable[[], Any]] = [
            lambda: s.cancel("b", reason="r", request_id="k-1"),  # another target
            lambda: s.cancel("a", reason="other", request_id="k-1"),  # another argument
            lambda: s.cancel("a", reason="r", by="eve", request_id="k-1"),  # another actor
            lambda: s.retry("a", request_id="k-1"),  # another operation
            lambda: s.release("b", request_id="k-1"),
            lambda: s.interrupt("b", request_id="k-1"),
            lambda: s.inject("b", 5, request_id="k-1"),
        ]
        for other in others:
            with pytest.raises(rota.RotaError) as caught:
                other()
            assert caught.value.code == "request_id_reused", caught.value
            assert "k-1" in str(caught.value) and "a new one" in str(caught.value)
        assert s.store.head() == head
        assert s.work("b").state == "ready"
    with opened(path, clock) as s:  # after a restart too
        with pytest.raises(rota.RotaError) as caught:
            s.cancel("b", reason="r", request_id="k-1")
        assert caught.value.code == "request_id_reused"


@pytest.mark.parametrize("bad", ["", "a b", "x\n", "é", "k" * 201, "a\x00"])
def test_a_malformed_request_id_is_refused_before_anything(
    path: Path, clock: ManualClock, bad: str
) -> None:
    with opened(path, clock) as s:
        s.submit("w", binding="ok", input=1)
        head = s.store.head()
        for command in (
            lambda: s.cancel("w", request_id=bad),
            lambda: s.retry("w", request_id=bad),
            lambda: s.release("w", request_id=bad),
            lambda: s.interrupt("w", request_id=bad),
            lambda: s.inject("w", 1, request_id=bad),
            lambda: s.settle_gate("w", "g", admit=True, request_id=bad),
        ):
            with pytest.raises(rota.InvalidCommand) as caught:
                command()
            assert caught.value.code == "invalid_request_id"
            assert "[A-Za-z0-9._:@/-]{1,200}" in str(caught.value)
        assert s.store.head() == head
        assert s.work("w").state == "ready"


def test_retry_is_recorded_once_under_its_request_id(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        s.submit("f", binding="fail", input=1)
        s.run_until_idle(timeout=10)
        assert s.work("f").state == "failed"
        first = s.retry("f", reason="fixed", requested_by="ada", request_id="retry-f")
        assert first.type == "core.manual.retry" and first.delivery_id == "request/retry-f"
        s.run_until_idle(timeout=10)  # it fails again: a new failure, another boundary
        again = s.retry("f", reason="fixed", requested_by="ada", request_id="retry-f")
        assert again.repeated and again.position == first.position
        assert len(events(s, "core.manual.retry")) == 1  # not a retry of the new failure
    repeated_after_restart(
        path,
        clock,
        first,
        lambda s: s.retry("f", reason="fixed", requested_by="ada", request_id="retry-f"),
    )


def test_release_is_recorded_once_under_its_request_id(path: Path, clock: ManualClock) -> None:
    with opened(path, clock, budgets=BUDGETS) as s:
        s.submit("w", binding="ok", kind="standing", input=1, input_key="1")
        s.run_until_idle(timeout=10)
        s.accept("w", 2, key="2")
        s.run_until_idle(timeout=10)
        assert s.work("w").state == "held"
        first = s.release("w", kind="budget", by="ada", request_id="rel-1")
        assert first.type == "core.work.released" and first.delivery_id == "request/rel-1"
        again = s.release("w", kind="budget", by="ada", request_id="rel-1")
        assert again.repeated and again.position == first.position
        assert len(events(s, "core.work.released")) == 1
    repeated_after_restart(
        path, clock, first, lambda s: s.release("w", kind="budget", by="ada", request_id="rel-1")
    )


def test_a_gate_settlement_is_recorded_once_under_its_request_id(
    path: Path, clock: ManualClock
) -> None:
    with opened(path, clock) as s:
        s.register_gate("approval", lambda work, binding, first: "needs a human")
        s.submit("g", binding="ok", input=1)
        s.run_until_idle(timeout=10)
        assert s.work("g").state == "held"
        first = s.settle_gate("g", "approval", admit=True, reason="ok", request_id="gate-g")
        assert first.type == "core.gate.released" and first.delivery_id == "request/gate-g"
        s.run_until_idle(timeout=10)
        again = s.settle_gate("g", "approval", admit=True, reason="ok", request_id="gate-g")
        assert again.repeated and again.position == first.position
        with pytest.raises(rota.RotaError) as caught:  # the other decision: another request
            s.settle_gate("g", "approval", admit=False, reason="ok", request_id="gate-g")
        assert caught.value.code == "request_id_reused"
        assert len(events(s, "core.gate.released")) == 1
    repeated_after_restart(
        path,
        clock,
        first,
        lambda s: s.settle_gate("g", "approval", admit=True, reason="ok", request_id="gate-g"),
    )


def blocking(s: rota.Scheduler) -> threading.Event:
    gate = threading.Event()
    s.register("block", lambda ctx: gate.wait(30) and None)
    return gate


def test_interrupt_and_inject_are_recorded_once(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        gate = blocking(s)
        try:
            s.submit("b", binding="block", kind="standing", input=0, input_key="0")
            s.tick()
            assert s.work("b").state == "running"
            answer = s.inject("b", {"n": 5}, by="ada", request_id="inj-1")
            assert answer.delivery == "control" and answer.request is not None
            injected = answer.request
            assert injected.type == "core.input.accepted"
            assert injected.delivery_id == "input/b/inj-1"  # the request id is the input key
            repeat = s.inject("b", {"n": 5}, by="ada", request_id="inj-1").request
            assert repeat is not None and repeat.repeated
            with pytest.raises(rota.RotaError) as caught:
                s.inject("b", {"n": 6}, by="ada", request_id="inj-1")  # another input
            assert caught.value.code == "request_id_reused"
            with pytest.raises(rota.RotaError) as caught:
                s.inject("b", {"n": 6}, key="other", request_id="inj-1")
            assert caught.value.code == "invalid_request_id"
            first = s.interrupt("b", by="ada", request_id="int-1")
            assert first.type == "core.control.requested"
            assert first.delivery_id == "request/int-1"
            assert s.work("b").state == "ready"  # fenced at once
            head = s.store.head()
            again = s.interrupt("b", by="ada", request_id="int-1")  # no live attempt now
            assert again.repeated and again.position == first.position
            late = s.inject("b", {"n": 5}, by="ada", request_id="inj-1").request  # fenced
            assert late is not None and late.repeated and late.position == injected.position
            assert s.store.head() == head
            requested = events(s, "core.control.requested")
            assert [e.data["kind"] for e in requested] == ["inject", "interrupt"]
            assert [e.type for e in s.events()].count("core.execution.interrupted") == 1
        finally:
            gate.set()
            s.run_until_idle(timeout=10)
    repeated_after_restart(
        path, clock, first, lambda s: s.interrupt("b", by="ada", request_id="int-1")
    )
    repeated_after_restart(
        path,
        clock,
        injected,
        lambda s: s.inject("b", {"n": 5}, by="ada", request_id="inj-1").request,
    )


def test_an_input_key_accepted_without_inject_answers_only_the_same_input(
    path: Path, clock: ManualClock
) -> None:
    """An inject's request id is its input's key: an input accepted under that key with
    another payload is another request; with the same payload it is that input (as a
    parked attempt's inject is: the input alone, no intent), and nothing is appended."""
    with opened(path, clock) as s:
        gate = blocking(s)
        try:
            s.submit("b", binding="block", kind="standing", input=0, input_key="taken")
            s.tick()
            with pytest.raises(rota.RotaError) as caught:
                s.inject("b", 1, request_id="taken")
            assert caught.value.code == "request_id_reused"
            head = s.store.head()
            same = s.inject("b", 0, request_id="taken").request
            assert same is not None and same.repeated and same.type == "core.input.accepted"
            assert s.store.head() == head
        finally:
            gate.set()
            s.run_until_idle(timeout=10)


def test_a_trigger_s_request_id_is_its_fire_key(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        s.schedules.define("tick", every="1h", binding="ok")
        first = s.schedules.trigger_now("tick", actor="ada", request_id="deploy-7")
        assert first is not None and not first.repeated
        assert first.identity == "schedule/tick/manual/deploy-7"
        head = s.store.head()
        again = s.schedules.trigger_now("tick", actor="ada", request_id="deploy-7")
        assert again is not None and again.repeated
        assert (again.identity, again.position) == (first.identity, first.position)
        assert s.schedules.trigger_now("tick", actor="ada", key="deploy-7") is None  # as before
        with pytest.raises(rota.RotaError) as caught:
            s.schedules.trigger_now("tick", actor="eve", request_id="deploy-7")
        assert caught.value.code == "request_id_reused"
        s.submit("w", binding="ok", input=1)
        s.cancel("w", request_id="cancel-7")
        with pytest.raises(rota.RotaError) as caught:  # the id names a cancel already
            s.schedules.trigger_now("tick", actor="ada", request_id="cancel-7")
        assert caught.value.code == "request_id_reused"
        assert s.store.head().position == head.position + 2  # the submit (1) and the cancel
    with opened(path, clock) as s:
        head = s.store.head()
        after = s.schedules.trigger_now("tick", actor="ada", request_id="deploy-7")
        assert after is not None and after.repeated and after.position == first.position
        assert s.store.head() == head
        assert len(events(s, "core.schedule.fired")) == 1


def test_the_async_facade_takes_request_ids(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        s.submit("w", binding="ok", input=1)

    async def main() -> tuple[rota.Receipt, rota.Receipt]:
        async with await rota.aio.open(path, clock=clock, owner="req") as s:
            first = await s.cancel("w", reason="r", request_id="aio-1")
            return first, await s.cancel("w", reason="r", request_id="aio-1")

    first, again = asyncio.run(main())
    assert first.delivery_id == "request/aio-1" and not first.repeated
    assert again.repeated and again.position == first.position


def test_the_cli_takes_a_request_id(path: Path, clock: ManualClock) -> None:
    with opened(path, clock) as s:
        s.submit("w", binding="ok", input=1)
        s.submit("v", binding="ok", input=1)
    store = ["--store", str(path)]
    first = cli(path.parent, *store, "cancel", "w", "--reason", "r", "--request-id", "op-1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().strip() == "w: cancelled"
    again = cli(path.parent, *store, "cancel", "w", "--reason", "r", "--request-id", "op-1")
    assert again.returncode == 0, again.stderr
    assert "request op-1 was recorded at position" in again.stdout.decode()
    assert "nothing new recorded" in again.stdout.decode()
    other = cli(path.parent, *store, "cancel", "v", "--reason", "r", "--request-id", "op-1")
    refused(other, "request_id_reused", 1)
    bad = cli(path.parent, *store, "cancel", "v", "--request-id", "a b")
    refused(bad, "invalid_request_id", 1)
    with opened(path, clock) as s:
        assert len(events(s, "core.work.cancelled")) == 1
        assert s.work("v").state == "ready"


def test_two_hosts_racing_one_request_on_postgresql_record_it_once() -> None:
    with temporary_schema() as schema:
        url = schema_url(schema)
        with rota.open(url, owner="host-a") as a, rota.open(url, owner="host-b") as b:
            a.register("ok", lambda ctx: None, inline=True)
            a.submit("w", binding="ok", input=1)
            a.submit("v", binding="ok", input=1)
            start = threading.Barrier(2)
            receipts: dict[str, rota.Receipt] = {}

            def cancel(name: str, s: rota.Scheduler) -> None:
                start.wait(10)
                receipts[name] = s.cancel("w", reason="r", by="ops", request_id="race-1")

            threads = [
                threading.Thread(target=cancel, args=(name, s)) for name, s in (("a", a), ("b", b))
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert receipts["a"].position == receipts["b"].position
            assert sorted(r.repeated for r in receipts.values()) == [False, True]
            with pytest.raises(rota.RotaError) as caught:
                b.cancel("v", reason="r", by="ops", request_id="race-1")
            assert caught.value.code == "request_id_reused"
            assert len(events(a, "core.work.cancelled")) == 1
        with rota.open(url, owner="host-c") as c:  # a restart
            again = c.cancel("w", reason="r", by="ops", request_id="race-1")
            assert again.repeated and again.position == receipts["a"].position
