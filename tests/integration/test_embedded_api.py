"""The embedded API as service developers expect it (issue 15 item 8): handles with
`wait()`/`result()`, typed views equal to the CLI's JSON, `register()`'s refusals, and the
asyncio facade `rota.aio`."""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from postgres import schema_url, temporary_schema

import rota
import rota.aio
import rota.embedded.handles
from rota.application.errors import ExecutorError
from rota.application.queries import work_views
from rota.infrastructure.clock import ManualClock

from .json_views import attempt_view, event_json, work_summary, work_view


@pytest.fixture
def scheduler() -> Iterator[rota.Scheduler]:
    with rota.open("memory://", owner="host-a") as s:
        yield s


def background(scheduler: rota.Scheduler) -> threading.Thread:
    runner = threading.Thread(target=scheduler.run, daemon=True)
    runner.start()
    return runner


def stop(scheduler: rota.Scheduler, runner: threading.Thread) -> None:
    scheduler.stop()
    runner.join(timeout=30)
    assert not runner.is_alive()


# -- handles --------------------------------------------------------------------------------


def test_submit_returns_a_handle_whose_result_is_the_attempts_data(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.register("greet", lambda ctx: {"hello": ctx.trigger["name"]})
    handle = scheduler.submit("g", binding="greet", input={"name": "Ada"})
    assert isinstance(handle, rota.WorkHandle)
    assert handle.work_id == "g"
    assert handle.view().state == "ready"
    runner = background(scheduler)
    try:
        assert handle.result(timeout=30) == {"hello": "Ada"}
        view = handle.wait(timeout=0)  # settled: returns at once, even with no time left
    finally:
        stop(scheduler, runner)
    assert view.state == "completed" and view.settled


def test_a_failed_work_raises_work_failed_with_the_attempts_error(
    scheduler: rota.Scheduler,
) -> None:
    def charge(ctx: rota.LaunchContext) -> None:
        raise rota.Fail("over_limit", "500 is above the limit", permanent=True)

    scheduler.register("charge", charge)
    handle = scheduler.submit("order", binding="charge")
    scheduler.run_until_idle(timeout=30)
    with pytest.raises(rota.WorkFailed) as raised:
        handle.result(timeout=5)
    assert raised.value.code == "work_failed"
    assert isinstance(raised.value, rota.RotaError)
    assert raised.value.attempt_error is not None
    assert raised.value.attempt_error.code == "over_limit"
    assert raised.value.view.state == "failed"


def test_a_cancelled_work_raises_work_cancelled(scheduler: rota.Scheduler) -> None:
    scheduler.register("job", lambda ctx: None)
    handle = scheduler.submit("w", binding="job")
    scheduler.cancel("w", reason="not needed")
    with pytest.raises(rota.WorkCancelled) as raised:
        handle.result(timeout=5)
    assert raised.value.code == "work_cancelled"


def test_waiting_past_the_timeout_raises_wait_timeout(scheduler: rota.Scheduler) -> None:
    scheduler.register("job", lambda ctx: None)
    handle = scheduler.submit("w", binding="job")  # nothing runs it
    with pytest.raises(rota.WaitTimeout) as raised:
        handle.wait(timeout=0.05)
    assert raised.value.code == "wait_timeout"
    assert isinstance(raised.value, TimeoutError)
    with pytest.raises(rota.WaitTimeout):
        handle.result(timeout=0)


def test_a_wait_is_woken_by_the_commit_not_by_a_poll(
    scheduler: rota.Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter blocks in the store's wait_for_commit; the settling commit (made by
    another thread here) ends the wait long before the bounded re-check would."""
    monkeypatch.setattr(rota.embedded.handles, "RECHECK_SECONDS", 3600.0)
    scheduler.register("job", lambda ctx: "done")
    handle = scheduler.submit("w", binding="job")
    waiting = threading.Event()
    real = scheduler.store.wait_for_commit

    def observed(after: int, timeout: float) -> bool:
        waiting.set()
        return real(after, timeout)

    monkeypatch.setattr(scheduler.store, "wait_for_commit", observed)
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(handle.result(timeout=60)))
    waiter.start()
    assert waiting.wait(30), "the waiter never blocked on the store"
    scheduler.run_until_idle(timeout=30)
    waiter.join(timeout=30)
    assert results == ["done"]


def test_standing_work_settles_when_its_submitted_input_was_consumed(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.register("echo", lambda ctx: {"n": ctx.trigger["n"]})
    first = scheduler.submit("s", binding="echo", kind="standing", input={"n": 1})
    assert first.input_position is not None
    assert not first.settled()
    scheduler.run_until_idle(timeout=30)
    assert first.result(timeout=5) == {"n": 1}
    second = scheduler.submit("s", binding="echo", kind="standing", input={"n": 2})
    assert second.input_position is not None and second.input_position > first.input_position
    assert not second.settled()  # the Work is idle, not settled, until n=2 is consumed
    scheduler.run_until_idle(timeout=30)
    assert second.result(timeout=5) == {"n": 2}
    assert first.result(timeout=0) == {"n": 1}  # each handle keeps its own input's result


def test_a_retried_submit_gets_a_handle_on_the_same_input(scheduler: rota.Scheduler) -> None:
    scheduler.register("job", lambda ctx: ctx.trigger)
    one = scheduler.submit("w", binding="job", input={"a": 1}, input_key="k")
    scheduler.run_until_idle(timeout=30)
    again = scheduler.submit("w", binding="job", input={"a": 1}, input_key="k")
    assert again.result(timeout=0) == {"a": 1}
    assert again.input_position == one.input_position


def test_a_handle_waits_for_work_another_process_runs(tmp_path: Path) -> None:
    store = tmp_path / "shared.db"
    with rota.open(store) as submitter:
        submitter.register("job", lambda ctx: None)  # lets this process accept the Work
        handle = submitter.submit("w", binding="job", input={"x": 1})
        code = (
            "import rota\n"
            f"with rota.open({str(store)!r}) as s:\n"
            "    s.register('job', lambda ctx: {'ran': ctx.trigger['x']})\n"
            "    s.run_until_idle(timeout=60)\n"
        )
        other = subprocess.Popen([sys.executable, "-P", "-c", code])
        try:
            assert handle.result(timeout=60) == {"ran": 1}
        finally:
            assert other.wait(timeout=60) == 0


@pytest.mark.postgres
def test_on_postgresql_a_handle_waits_for_work_another_scheduler_runs() -> None:
    with temporary_schema() as schema:
        url = schema_url(schema)
        with rota.open(url) as submitter, rota.open(url) as runner:
            submitter.register("job", lambda ctx: None)  # lets it accept the Work
            runner.register("job", lambda ctx: {"ran": ctx.trigger["x"]})
            handle = submitter.submit("w", binding="job", input={"x": 2})
            thread = background(runner)
            try:
                assert handle.result(timeout=60) == {"ran": 2}
            finally:
                stop(runner, thread)
            standing = submitter.submit("s", binding="job", kind="standing", input={"x": 3})
            with pytest.raises(rota.WaitTimeout):
                standing.wait(timeout=0.1)  # nobody runs it now


# -- typed views ------------------------------------------------------------------------------


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)


def _rich_store(scheduler: rota.Scheduler) -> None:
    def job(ctx: rota.LaunchContext) -> Any:
        with ctx.phase("prepare"):
            pass
        if ctx.trigger.get("fail"):
            raise rota.Fail("boom", "it broke", permanent=True)
        return rota.Result(outcome="completed", data={"ok": True}, usage={"cents": 3})

    scheduler.register("job", job, retry=rota.RetryPolicy(max_attempts=3))
    scheduler.submit("done", binding="job", input={"fail": False})
    scheduler.submit("broken", binding="job", input={"fail": True})
    scheduler.submit("later", binding="job", kind="standing")
    scheduler.run_until_idle(timeout=30)
    scheduler.submit("pending", binding="job", input={"fail": False}, correlation_key="c-1")


def test_views_are_frozen_structs_equal_to_the_json_views(scheduler: rota.Scheduler) -> None:
    _rich_store(scheduler)
    projection = scheduler.service.projection
    for work_id in ("done", "broken", "later", "pending"):
        view = scheduler.work(work_id)
        assert isinstance(view, rota.WorkView)
        state = projection.works[work_id]
        # The same fields, in the same order, with the same values: the same bytes.
        assert encode(view) == encode(work_view(state, None))
        assert encode(scheduler.executions(work_id)) == encode(
            [attempt_view(a) for a in state.attempts]
        )
        with pytest.raises(AttributeError):
            view.state = "x"  # type: ignore[misc]
    summaries = scheduler.works()
    assert all(isinstance(s, rota.WorkSummary) for s in summaries)
    assert encode(summaries) == encode([work_summary(projection.works[s.id]) for s in summaries])
    events = scheduler.events()
    assert all(isinstance(e, rota.EventView) for e in events)
    assert encode(events) == encode([event_json(r) for r in scheduler.store.read(0, 1000)])
    done = scheduler.work("done")
    assert done is not None
    (attempt,) = done.attempts
    assert attempt.data == {"ok": True} and attempt.usage == {"cents": 3.0}
    assert attempt.segments[0].phases[0].name == "prepare"
    broken = scheduler.work("broken")
    assert broken is not None and broken.attempts[0].error == rota.ErrorView(
        code="boom", message="it broke"
    )


def _struct_keys(kind: type[msgspec.Struct]) -> list[str]:
    return list(kind.__struct_fields__)


def test_struct_fields_equal_the_cli_json_keys(tmp_path: Path) -> None:
    store = tmp_path / "cli.db"
    with rota.open(store) as s:
        _rich_store(s)
        expected_show = s.work("done")
        expected_list = s.works()
    rota_cli = [sys.executable, "-P", "-m", "rota", "--store", str(store)]

    def cli(*args: str) -> str:
        done = subprocess.run(
            [*rota_cli, *args], capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    shown = cli("work", "show", "done", "--json")
    # Byte-identical: the CLI prints the Struct msgspec encodes.
    assert expected_show is not None and shown == expected_show.to_json().decode() + "\n"
    parsed = json.loads(shown)
    assert list(parsed) == _struct_keys(rota.WorkView)
    assert list(parsed["attempts"][0]) == _struct_keys(rota.AttemptView)
    assert list(parsed["attempts"][0]["segments"][0]) == _struct_keys(rota.SegmentView)
    assert list(parsed["attempts"][0]["segments"][0]["phases"][0]) == _struct_keys(rota.PhaseView)
    assert list(parsed["retry"]) == _struct_keys(rota.RetryView)
    listed = json.loads(cli("work", "list", "--json"))
    assert [list(item) for item in listed] == [_struct_keys(rota.WorkSummary)] * len(listed)
    # The same Works; `waiting` may differ: the CLI's process registers no callable "job".
    assert [w["id"] for w in listed] == [w.id for w in expected_list]
    pending = json.loads(cli("work", "show", "pending", "--json"))
    assert list(pending["pending"][0]) == _struct_keys(rota.PendingView)
    events = json.loads(cli("events", "--json"))
    assert list(events[0]) == _struct_keys(rota.EventView)


def test_every_view_is_exported_and_documented_field_by_field() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide.md").read_text()
    for name in work_views.__all__:
        kind = getattr(work_views, name)
        if not (inspect.isclass(kind) and issubclass(kind, work_views.View)):
            continue
        assert getattr(rota, name, None) is kind or name == "View", name
        if name == "View":
            continue
        assert f"`{name}`" in guide, f"docs/guide.md does not document {name}"
        for field in kind.__struct_fields__:
            assert f"`{field}`" in guide, f"docs/guide.md does not document {name}.{field}"


# -- register() -------------------------------------------------------------------------------


def test_register_refuses_what_is_not_callable(scheduler: rota.Scheduler) -> None:
    with pytest.raises(rota.RegistrationError) as raised:
        scheduler.register("job", "not a function")  # type: ignore[arg-type]
    assert raised.value.code == "not_callable"
    assert "is not callable" in str(raised.value)
    assert "job" not in scheduler.executors


@pytest.mark.parametrize(
    "fn",
    [
        lambda: None,
        lambda ctx, other: None,
        lambda *, ctx: None,
    ],
    ids=["no-argument", "two-required", "keyword-only"],
)
def test_register_refuses_a_callable_that_cannot_take_the_context(
    scheduler: rota.Scheduler, fn: Any
) -> None:
    with pytest.raises(rota.RegistrationError) as raised:
        scheduler.register("job", fn)
    assert raised.value.code == "not_callable"
    assert "one positional argument" in str(raised.value)
    assert "job" not in scheduler.executors


class Job:
    def __call__(self, ctx: rota.LaunchContext) -> None:
        return None


@pytest.mark.parametrize(
    "fn",
    [lambda ctx: None, lambda *args: None, lambda ctx, extra=1: None, Job(), print],
    ids=["one", "varargs", "default", "callable-object", "builtin"],
)
def test_register_takes_a_callable_that_can_take_the_context(
    scheduler: rota.Scheduler, fn: Any
) -> None:
    scheduler.register("job", fn)
    assert "job" in scheduler.executors


def test_a_second_registration_is_refused_unless_replace(scheduler: rota.Scheduler) -> None:
    scheduler.register("job", lambda ctx: "first")
    with pytest.raises(rota.RegistrationError) as raised:
        scheduler.register("job", lambda ctx: "second")
    assert raised.value.code == "already_registered"
    assert "replace=True" in str(raised.value)
    with pytest.raises(rota.RegistrationError):
        scheduler.register("shell", lambda ctx: None)  # the built-in counts too
    scheduler.register("job", lambda ctx: "second", replace=True)
    handle = scheduler.submit("w", binding="job")
    scheduler.run_until_idle(timeout=30)
    assert handle.result(timeout=0) == "second"


def test_registering_the_executor_a_config_binding_names_is_a_first_registration() -> None:
    config = {"bindings": [{"name": "nightly", "executor": "report"}]}
    with rota.open("memory://", config=config) as scheduler:
        scheduler.register("report", lambda ctx: "ok", binding=False)
        handle = scheduler.submit("n", binding="nightly")
        scheduler.run_until_idle(timeout=30)
        assert handle.result(timeout=0) == "ok"
        with pytest.raises(rota.RegistrationError):
            scheduler.register("report", lambda ctx: "again", binding=False)


def test_register_historical_refuses_what_is_not_callable(scheduler: rota.Scheduler) -> None:
    with pytest.raises(rota.RegistrationError):
        scheduler.register_historical("g", "job", lambda: None)


def test_executor_error_is_a_rota_error() -> None:
    assert issubclass(ExecutorError, rota.RotaError)
    assert rota.ExecutorError is ExecutorError
    error = ExecutorError("could not launch")
    assert isinstance(error, rota.RotaError) and error.code == "executor_error"


# -- rota.aio -----------------------------------------------------------------------------------


def test_aio_submits_waits_and_runs_async_executors() -> None:
    loops: list[int] = []

    async def greet(ctx: rota.LaunchContext) -> dict[str, str]:
        await asyncio.sleep(0)  # a real coroutine, awaited on rota's loop
        loops.append(id(asyncio.get_running_loop()))
        return {"hello": ctx.trigger["name"]}

    async def main() -> tuple[Any, Any, str, int]:
        async with await rota.aio.open("memory://") as scheduler:
            scheduler.register("greet", greet)
            scheduler.start()
            handles = [
                await scheduler.submit(f"g-{n}", binding="greet", input={"name": f"n{n}"})
                for n in range(3)
            ]
            ticks = 0

            async def heartbeat() -> None:
                nonlocal ticks
                while True:
                    ticks += 1  # the caller's loop keeps running while handles wait
                    await asyncio.sleep(0.001)

            beat = asyncio.create_task(heartbeat())
            results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
            beat.cancel()
            view = await scheduler.work("g-0")
            assert view is not None
            return results, id(asyncio.get_running_loop()), view.state, ticks

    results, caller_loop, state, ticks = asyncio.run(main())
    assert results == [{"hello": "n0"}, {"hello": "n1"}, {"hello": "n2"}]
    assert state == "completed"
    assert len(loops) == 3 and caller_loop not in loops  # rota's own loop, not the caller's
    assert ticks > 0


def test_aio_failures_and_timeouts_are_the_same_errors() -> None:
    async def charge(ctx: rota.LaunchContext) -> None:
        raise rota.Fail("declined", permanent=True)

    async def main() -> None:
        scheduler = await rota.aio.open("memory://")
        async with scheduler:
            scheduler.register("charge", charge)
            scheduler.register("idle", lambda ctx: None)
            failing = await scheduler.submit("c", binding="charge")
            waiting = await scheduler.submit("i", binding="idle")
            await scheduler.cancel("i")
            await scheduler.run_until_idle(timeout=30)
            with pytest.raises(rota.WorkFailed) as failed:
                await failing.result(timeout=5)
            assert failed.value.attempt_error is not None
            assert failed.value.attempt_error.code == "declined"
            with pytest.raises(rota.WorkCancelled):
                await waiting.result(timeout=5)
            late = await scheduler.submit("late", binding="idle")
            with pytest.raises(rota.WaitTimeout):
                await late.wait(timeout=0.05)
            [many] = await scheduler.submit_many([{"work_id": "m", "binding": "idle"}])
            assert (await many.view()).state == "ready"
            await scheduler.retry("c")
            assert (await scheduler.work("c")) is not None

    asyncio.run(main())


def test_an_async_job_is_cancelled_when_its_attempt_is() -> None:
    clock = ManualClock(datetime(2026, 12, 1, 9, tzinfo=UTC))
    started = threading.Event()
    cancelled = threading.Event()

    async def slow(ctx: rota.LaunchContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("slow", slow)
        scheduler.submit("w", binding="slow")
        scheduler.tick()
        assert started.wait(30)
        scheduler.interrupt("w")
        for _ in range(30):  # the interrupt is dispatched by a cadence pass
            scheduler.tick()
            if cancelled.wait(1):
                break
        assert cancelled.is_set()
