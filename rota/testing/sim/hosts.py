"""A simulated host: the real service and cadence over a faulty handle on the shared log.

A `SimHost` is what `rota run` composes (`rota.bootstrap`): a `SchedulerService` and a
`Host` over the host's own store handle, with the simulated executors in place of the
built-in ones and a `SimPool` in place of the launcher's threads. The world ticks it,
runs its launcher's tasks, crashes it (`SimCrash`: the instance is dropped, nothing of it
runs again), pauses it (SIGSTOP: it is not stepped until it resumes) and restarts it under
a new owner name, as a new process would be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from rota import bootstrap
from rota.application.host import Host, TickReport
from rota.application.ports import EventStore, Executor
from rota.application.queries import Queries
from rota.application.service import SchedulerService
from rota.domain.errors import RotaError
from rota.domain.policy import Binding, Settings
from rota.testing.sim.executors import Machine, SimCalls, SimEager, SimJobs
from rota.testing.sim.faults import FaultPlan, FaultyStore, SimCrash
from rota.testing.sim.pool import SimPool


class SimHost:
    """One running instance of a simulated daemon (module docstring)."""

    def __init__(
        self,
        name: str,
        owner: str,
        store: EventStore,
        plan: FaultPlan,
        machine: Machine,
        *,
        settings: Settings,
        bindings: dict[str, Binding],
        is_alive: Callable[[str], bool],
    ) -> None:
        self.name = name  # the host (a machine slot: h1, h2 ...)
        self.owner = owner  # this instance (h1, then h1.2 after a restart ...)
        self.store = FaultyStore(store, plan, owner)
        self.alive = True
        self.paused_until: float | None = None
        self.last_tick = float("-inf")  # true time of its last pass
        self.due_at = 0.0  # true time its next pass is due, by its own next_wake
        self.seen_head = -1  # the log head its last pass began at
        self.passes = 0
        self.backing_off = False
        self.internal_error: str | None = None
        self.failed_passes = 0
        self.executors: dict[str, Executor] = {
            "sim-calls": SimCalls(machine, owner, is_alive, self.crash),
            "sim-jobs": SimJobs(machine, owner, is_alive, self.crash),
            "sim-eager": SimEager(machine, owner, is_alive, self.crash),
        }
        with plan.disarmed():  # a process that cannot open its store does not start
            self.service: SchedulerService = bootstrap.build_service(
                self.store,
                settings=settings,
                owner=owner,
                bindings=dict(bindings),
                registrations=bootstrap.registrations_of(self.executors),
            )
            self.host: Host = bootstrap.build_host(self.service, self.executors)
        self.pool = SimPool()
        self.host.launches.pool = self.pool
        self.queries = Queries(self.service, self.host)  # what the checks read

    def crash(self, where: str) -> NoReturn:
        """Die here: the store refuses every later call of this instance."""
        self.store.dead = True
        raise SimCrash(f"{self.owner}: crashed {where}")

    def tick(self) -> TickReport | None:
        """One cadence pass, as the daemon loop runs it: a pass that raises is counted and
        retried later (`rota.daemon.DaemonLoop.run`); a crash goes on to the world."""
        self.host.wake.clear()
        self.passes += 1
        try:
            return self.host.tick()
        except Exception as exc:
            self.failed_passes += 1
            self.note_error(exc)
            return None

    def note_error(self, error: BaseException) -> None:
        """Keep an escape that is not a `RotaError` for the world's `no_internal_error`."""
        described = internal(error)
        if described is not None and self.internal_error is None:
            self.internal_error = described

    def take_internal_error(self) -> str | None:
        """The first internal error seen since the last call (launcher tasks included)."""
        for error in self.pool.errors:
            self.note_error(error)
        self.pool.errors.clear()
        found, self.internal_error = self.internal_error, None
        return found

    def wants_pass(self, head: int, t: float) -> bool:
        """Whether the daemon loop would run a pass now: a commit to the log, a result
        reported, its wake set, or its next wake due."""
        if not self.alive or self.stopped(t):
            return False
        if self.backing_off:  # the loop waits out its backoff after a failed pass
            return t >= self.due_at
        if head != self.seen_head or self.host.wake.is_set():
            return True
        return not self.host.results.empty() or t >= self.due_at

    def stopped(self, t: float) -> bool:
        return self.paused_until is not None and t < self.paused_until

    def after_pass(self, head: int, t: float, failed: bool) -> None:
        """Note what the loop notes after a pass: when the next is due."""
        self.seen_head, self.last_tick, self.backing_off = head, t, failed
        if failed:
            self.due_at = t + min(5.0, 0.1 * 2 ** min(self.failed_passes, 6))
            return
        try:
            wait = self.host.next_wake(5.0)
        except Exception:
            wait = 1.0
        self.due_at = t + max(wait, 0.001)

    def stop_gracefully(self) -> None:
        """SIGTERM: release every lease and the schedule leader lease, leave detached
        processes running for the next host to adopt (`Host.close`)."""
        self.alive = False
        try:
            self.host.close()
        finally:
            self.store.dead = True


def internal(error: BaseException) -> str | None:
    """A description of `error` if it is an internal error (not a `RotaError`)."""
    if isinstance(error, RotaError):
        return None
    return f"{type(error).__name__}: {error}"
