"""Checked by mypy (tests/unit/test_typed_bindings.py), never imported by pytest: what the
type checker sees of a typed registration. `# revealed: X` names the type mypy must reveal
on that line; `# error: code` an error it must report there."""

from __future__ import annotations

from typing import reveal_type

import rota
import rota.aio
from rota import LaunchContext


def greet(ctx: LaunchContext) -> dict[str, str]:
    return {"hello": str(ctx.trigger)}


async def count(ctx: LaunchContext) -> int:
    return 1


def outcome(ctx: LaunchContext) -> rota.Result:
    return rota.Result(outcome="completed")


def embedded(scheduler: rota.Scheduler) -> None:
    typed = scheduler.register("greet", greet)
    reveal_type(typed)  # revealed: rota.embedded.registering.TypedBinding[dict[str, str]]
    handle = scheduler.submit("greet-ada", binding=typed, input={"name": "Ada"})
    reveal_type(handle)  # revealed: rota.embedded.handles.WorkHandle[dict[str, str]]
    reveal_type(handle.result())  # revealed: dict[str, str]
    counted = scheduler.register("count", count)  # an async def: what it awaits to
    reveal_type(counted)  # revealed: rota.embedded.registering.TypedBinding[int]
    nothing = scheduler.register("noop", lambda ctx: None)
    reveal_type(nothing)  # revealed: rota.embedded.registering.TypedBinding[None]
    result = scheduler.register("outcome", outcome)  # a rota.Result: its data is anything
    reveal_type(result)  # revealed: rota.embedded.registering.TypedBinding[Any]
    executor = scheduler.register("shell2", executor=None)
    reveal_type(executor)  # revealed: rota.embedded.registering.TypedBinding[Any]
    by_name = scheduler.submit("greet-bob", binding="greet")
    reveal_type(by_name.result())  # revealed: Any
    _: int = handle.result()  # error: assignment
    scheduler.submit("w", binding=typed, inputs=1)  # error: call-overload
    scheduler.register("greet", greet, pool=3)  # error: call-overload
    reveal_type(scheduler.capacity()["pools"]["agents"]["in_use"])  # revealed: int
    scheduler.capacity()["pool"]  # error: typeddict-item
    bucket = scheduler.capacity()["buckets"]["resource:stripe"]
    reveal_type(bucket["next_token"])  # revealed: str | None
    reveal_type(scheduler.capacity()["keys"]["tenant:acme"]["in_use"])  # revealed: int


async def asynchronous(scheduler: rota.aio.AsyncScheduler) -> None:
    typed = scheduler.register("count", count)
    handle = await scheduler.submit("count-1", binding=typed)
    reveal_type(handle)  # revealed: rota.aio.AsyncWorkHandle[int]
    reveal_type(await handle.result())  # revealed: int
    await scheduler.retry("count-1", reason=1)  # error: arg-type


def items(scheduler: rota.Scheduler) -> None:
    scheduler.submit_many([{"work_id": "a", "binding": "b", "kind": "standing"}])
    scheduler.submit_many([{"work_id": "a", "bindin": "b"}])  # error: list-item
