"""Input decided on a Work's state is appended at the version it read: a cancel another
scheduler records between the decision and the append makes the input be decided again,
and refused (found by the simulator, issue 29: input was accepted after the cancel)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.testing.sim.invariants import check_store


def cancel_before_next_append(b: rota.Scheduler, cancel: Callable[[], Any]) -> None:
    """Make `b`'s next append run `cancel` (another scheduler's) first, as a concurrent
    session would between `b`'s decision and its write."""
    store = b.service.store
    real = store.append

    def racing(events: Sequence[Any], expected: Any = None) -> Any:
        store.append = real  # type: ignore[method-assign]
        cancel()
        return real(events, expected)

    store.append = racing  # type: ignore[method-assign]


@pytest.mark.parametrize("path", ["accept", "submit"])
def test_input_racing_a_cancel_from_another_scheduler_is_refused(path: str) -> None:
    clock = ManualClock()
    url = f"memory://input-race-{path}"
    with rota.open(url, clock=clock, owner="a") as a, rota.open(url, clock=clock, owner="b") as b:
        for s in (a, b):
            s.register("job", lambda ctx: None, inline=True)
        a.submit("w", binding="job", input={"n": 1})
        b.service.catch_up()  # b has seen the Work, not yet its cancel
        cancel_before_next_append(b, lambda: a.cancel("w", reason="operator"))
        with pytest.raises(rota.RotaError) as refused:
            if path == "accept":
                b.service.lifecycle.accept("w", {"n": 2}, key="k2")
            else:
                b.submit("w", binding="job", input={"n": 2}, input_key="k2")
        assert refused.value.code == "work_terminal"
        types = [e.type for e in a.events()]
        assert types == ["core.work.submitted", "core.work.cancelled"]  # (its input carried)
        assert check_store(a.store, a.settings) == []


def test_input_with_no_race_still_appends_once() -> None:
    clock = ManualClock()
    with rota.open("memory://input-no-race", clock=clock) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.submit("w", binding="job", input={"n": 1}, input_key="k1")
        s.service.lifecycle.accept("w", {"n": 2}, key="k2")
        s.service.lifecycle.accept("w", {"n": 2}, key="k2")  # the same input again: a no-op
        accepted = [e for e in s.events() if e.type == "core.input.accepted"]
        assert [e.data["key"] for e in accepted] == ["k2"]  # (k1: carried by the definition)
        assert [p.key for p in s.work("w").pending] == ["k1", "k2"]
