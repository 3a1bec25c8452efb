"""Given events / when command / then events, over the pure domain.

`Story` keeps a Work's state by folding the events it is given (or that a decision
emitted) through `rota.domain.evolve`, with positions and times assigned as a log would.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rota.domain.emit import Emit
from rota.domain.errors import RotaError
from rota.domain.events import Event
from rota.domain.evolve import evolve
from rota.domain.policy import Binding, Pinned, Registration, RetryPolicy
from rota.domain.state import WorkState

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def pinned(
    *,
    timeout: float = 3600.0,
    lease: float = 60.0,
    retry: RetryPolicy | None = None,
    pool: str = "agents",
    max_segments: int = 50,
) -> Pinned:
    return Pinned(
        generation="gen1",
        binding=Binding(name="b", executor="x", retry=retry or RetryPolicy()),
        registration=Registration(name="x", pool=pool),
        timeout_seconds=timeout,
        lease_seconds=lease,
        max_segments=max_segments,
    )


class Story:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now
        self.position = 0
        self.work: WorkState | None = None
        self.log: list[tuple[int, Emit]] = []

    def at(self, seconds: float) -> Story:
        self.now = T0 + timedelta(seconds=seconds)
        return self

    def apply(self, *emits: Emit) -> list[int]:
        positions = []
        for emit in emits:
            self.position += 1
            self.log.append((self.position, emit))
            if emit.stream.startswith("work/"):
                self.work = evolve(self.work, emit.event, self.position, self.now)
            positions.append(self.position)
        return positions

    def given(self, *items: Emit | list[Emit]) -> Story:
        for item in items:
            if isinstance(item, list):
                self.apply(*item)
            else:
                self.apply(item)
        return self

    def when(self, decide: Callable[[WorkState | None], Emit | list[Emit]]) -> list[Emit]:
        result = decide(self.work)
        emits = result if isinstance(result, list) else [result]
        self.apply(*emits)
        return emits

    def refused(self, decide: Callable[[WorkState | None], Any], code: str) -> RotaError:
        before = self.work
        with pytest.raises(RotaError) as caught:
            decide(self.work)
        assert caught.value.code == code, f"{caught.value.code}: {caught.value}"
        assert self.work is before
        return caught.value

    @property
    def state(self) -> WorkState:
        assert self.work is not None
        return self.work


def events(emits: list[Emit]) -> list[Event]:
    return [e.event for e in emits]
