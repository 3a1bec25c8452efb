"""A typed registration: `register` returns a `TypedBinding[T]`, `submit(binding=it)` a
`WorkHandle[T]` whose `result()` is a `T`. Checked by mypy (tests/typing/typed_bindings.py,
its `# revealed:` and `# error:` expectations) and at run time."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import mypy.api
import pytest

import rota
import rota.aio
from rota.domain.submission import SubmitWork, WorkInput
from rota.embedded.submission_values import Submission, submit_command

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "typing" / "typed_bindings.py"
NOTE = re.compile(r"^.+?:(\d+): note: Revealed type is \"(.+)\"$")
ERROR = re.compile(r"^.+?:(\d+): error: .*\[([a-z-]+)\]$")


def expectations(kind: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for number, line in enumerate(CASES.read_text().splitlines(), start=1):
        if f"  # {kind}: " in line:
            found[number] = line.split(f"  # {kind}: ", 1)[1].strip()
    return found


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    cache = tmp_path_factory.mktemp("mypy-cache")
    config = str(ROOT / "pyproject.toml")
    out, err, _ = mypy.api.run(
        ["--config-file", config, "--cache-dir", str(cache), "--show-error-codes", str(CASES)]
    )
    assert not err, err
    return out.splitlines()


def test_mypy_reveals_the_callables_return_type(mypy_output: list[str]) -> None:
    revealed = {int(m[1]): m[2] for line in mypy_output if (m := NOTE.match(line))}
    wanted = expectations("revealed")
    assert len(wanted) >= 10
    assert revealed == wanted


def test_mypy_refuses_what_the_types_forbid_and_nothing_else(mypy_output: list[str]) -> None:
    errors: dict[int, set[str]] = {}
    for line in mypy_output:
        if m := ERROR.match(line):
            errors.setdefault(int(m[1]), set()).add(m[2])
    wanted = expectations("error")
    assert len(wanted) >= 5
    assert set(errors) == set(wanted), mypy_output
    for number, code in wanted.items():
        assert code in errors[number], (number, errors[number])


def test_register_returns_a_typed_binding_that_submit_takes() -> None:
    with rota.open("memory://", owner="host-a") as scheduler:
        greet = scheduler.register("greet", lambda ctx: {"hello": ctx.trigger["name"]})
        assert isinstance(greet, rota.TypedBinding)
        assert greet == rota.TypedBinding("greet") and str(greet) == "greet"
        handle = scheduler.submit("g", binding=greet, input={"name": "Ada"})
        by_name = scheduler.submit("h", binding="greet", input={"name": "Bob"})
        scheduler.run_until_idle()
        assert handle.result(timeout=0) == {"hello": "Ada"}
        assert by_name.result(timeout=0) == {"hello": "Bob"}
        assert scheduler.work("g").binding == "greet"  # type: ignore[union-attr]


def test_the_async_facade_takes_a_typed_binding() -> None:
    async def count(ctx: rota.LaunchContext) -> int:
        return len(ctx.trigger["items"])

    async def main() -> int:
        async with await rota.aio.open("memory://") as scheduler:
            counting = scheduler.register("count", count)
            handle = await scheduler.submit("c", binding=counting, input={"items": [1, 2, 3]})
            await scheduler.run_until_idle()
            return await handle.result(timeout=0)

    assert asyncio.run(main()) == 3


def test_a_submission_becomes_one_submit_command() -> None:
    assert submit_command(Submission("w", "b", input={"n": 1}, input_key="k")) == SubmitWork(
        work_id="w", binding="b", inputs=(WorkInput({"n": 1}, "k"),)
    )
    # No input: a run-once Work gets an empty one under key "submit"; a standing one none.
    assert submit_command(Submission("w", "b", correlation_key="c")).inputs == (
        WorkInput(None, "submit", "c"),
    )
    assert submit_command(Submission("w", "b", kind="standing")).inputs == ()
