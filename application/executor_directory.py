"""The executors of one host: which one serves an attempt, and how each registers.

`ExecutorDirectory` holds a host's executors, current and historical, and answers which
one serves an attempt's pinned configuration generation; `registration_of` is what an
executor registers as (its pool and capabilities). The launches (`launches.py`) and the
host's steps ask the directory; it asks nothing of them.
"""

from __future__ import annotations

from rota.application.ports import Executor
from rota.application.service import SchedulerService
from rota.domain.policy import Pinned, Registration
from rota.domain.state import AttemptState


class ExecutorDirectory:
    """The executors of one host, and which one serves an attempt's pinned generation."""

    def __init__(self, service: SchedulerService, executors: dict[str, Executor]) -> None:
        self.service = service
        self.executors = executors
        # (generation, registration) -> the implementation that serves attempts pinned there.
        self.historical: dict[tuple[str, str], Executor] = {}
        # generation -> registrations whose CURRENT implementation also serves it (None: all).
        self.compatible: dict[str, frozenset[str] | None] = {}

    def executor_for(self, attempt: AttemptState) -> Executor | None:
        """The executor of the attempt's pinned generation; None when this host has none.

        A stable executor serves every generation; any other serves its own generation,
        or an older one only when registered as that generation's historical executor
        (or declared compatible with it). A missing generation is never given to a
        replacement.
        """
        return self.executor_pinned(attempt.pinned)

    def executor_pinned(self, pinned: Pinned) -> Executor | None:
        """The executor serving attempts pinned so (see `executor_for`)."""
        generation, name = pinned.generation, pinned.registration.name
        historical = self.historical.get((generation, name))
        if historical is not None:
            return historical
        executor = self.executors.get(name)
        if executor is None:
            return None
        if executor.stable or generation == self.service.generation:
            return executor
        if generation in self.compatible:
            names = self.compatible[generation]
            if names is None or name in names:
                return executor
        return None

    def keep(self, generation: str, executors: dict[str, Executor]) -> None:
        """The configuration moved on from `generation`: its implementations keep serving
        the attempts pinned to it (a registration replaced in this process)."""
        for name, executor in executors.items():
            if not executor.stable:
                self.historical.setdefault((generation, name), executor)

    def unsupported(self, attempt: AttemptState) -> str:
        """The explicit error for an attempt this host has no executor for."""
        return (
            f"unsupported_generation: {attempt.execution_id}: this host has no executor "
            f"{attempt.pinned.registration.name!r} for configuration generation "
            f"{attempt.pinned.generation} (register it with Scheduler.register_historical, "
            "or name the generation under [[historical]] in the config)"
        )

    def all_executors(self) -> list[Executor]:
        """Every distinct executor instance this host holds, current and historical."""
        seen: dict[int, Executor] = {}
        for executor in [*self.executors.values(), *self.historical.values()]:
            seen.setdefault(id(executor), executor)
        return list(seen.values())


def registration_of(name: str, executor: Executor | type[Executor]) -> Registration:
    """How `executor` (an instance or, for class-level settings, its class) registers
    under `name`: its capacity pool and its capabilities, sorted."""
    return Registration(
        name=name, pool=executor.pool, capabilities=tuple(sorted(executor.capabilities))
    )
