"""One simulated run: hosts, machine, clock and faults, stepped by one seeded source.

`World(seed, shape).run()` builds a deployment on a fresh in-memory log (or an SQLite
file), draws its `Workload`, and then repeats one step until the horizon: it lists what
could happen next (a host's cadence pass when the daemon loop would run one, a task on
a host's launcher, a process ending, a due action of the workload) and lets the seeded
`Random` pick one; when nothing can happen it moves true time to the next moment
something can. After every step it reads the events the step appended and hands each
to the invariant checker (`rota.testing.sim.checks`); the first violation stops the run.

There are no threads, sleeps or wall-clock reads inside a run, and nothing iterates an
unordered set, so a seed names one run: the same seed gives the same log byte for byte.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

from rota import bootstrap
from rota.application.ports import EventStore
from rota.domain import admission
from rota.infrastructure.memory.backend import forget
from rota.infrastructure.stores import open_store
from rota.replay.export import export_to_file
from rota.testing.sim.checks import Checks
from rota.testing.sim.clock import SimClock, dst_start
from rota.testing.sim.executors import ExecutorFaults, Machine
from rota.testing.sim.faults import FaultPlan, FaultRates, SimCrash
from rota.testing.sim.hosts import SimHost
from rota.testing.sim.invariants import Violation
from rota.testing.sim.invariants.passes import plan_recorder
from rota.testing.sim.operations import perform
from rota.testing.sim.workload import (
    Shape,
    Workload,
    bindings,
    budgets,
    flow_config,
    settings,
)

_RUNS = itertools.count(1)
LOGGERS = ("rota", "rota.decisions", "rota.host", "rota.transactions")


@dataclass
class Outcome:
    """What one run did (the CLI prints it)."""

    seed: int
    steps: int = 0
    events: int = 0
    simulated_seconds: float = 0.0
    head_hash: str = ""
    violation: Violation | None = None
    faults: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    types: dict[str, int] = field(default_factory=dict)  # events recorded, by type


class World:
    """One run (module docstring)."""

    def __init__(
        self,
        seed: int,
        shape: Shape | None = None,
        *,
        until: int | None = None,
        keep: bool = False,
        sqlite: Path | None = None,
    ) -> None:
        self.seed = seed
        self.keep = keep  # keep the log after the run (`export`); else it is dropped
        self.shape = shape or Shape()
        self.until = until  # stop once the log holds this position (replaying a failure)
        self.random = Random(seed)
        self.clock = SimClock(dst_start(self.random))
        rates = FaultRates.default() if self.shape.faults else FaultRates.none()
        self.plan = FaultPlan(self.random, rates)
        faults = ExecutorFaults.default() if self.shape.faults else ExecutorFaults()
        self.machine = Machine(self.random, faults, now=lambda: self.clock.t)
        self.plan.preempt, self.plan.now = self.preempt, lambda: self.clock.t
        # The log: a named in-memory store, or (`sqlite`: a folder) an SQLite file every
        # host opens a connection of its own to, as the daemons of one machine do.
        if sqlite is None:
            self.url = f"memory://rota-sim-{seed}-{next(_RUNS)}"
        else:
            self.url = str(sqlite / f"rota-sim-{seed}-{next(_RUNS)}.db")
        self.log: EventStore = self.open_log()
        if sqlite is None:
            # The store's id is in an export's header: named by the seed, not drawn at
            # random (an SQLite file's is drawn when it is created).
            self.log.log.store_id = f"rota-sim-{seed}"  # type: ignore[attr-defined]
        self.settings = settings()
        self.generation = 0
        self.workload = Workload(self.random, self.shape)
        self.hosts: dict[str, SimHost] = {}
        self.instances: dict[str, int] = {}
        self.dead: set[str] = set()
        self.outcome = Outcome(seed)
        self.checks = Checks(self)
        self.end = self.workload.horizon
        self.acknowledged: dict[str, int] = {}  # Work id -> how often a submit was answered
        self.coalesced: dict[str, int] = {}  # the same, of submits merged or suppressed
        for i in range(self.shape.hosts):
            self.start_host(f"h{i + 1}")

    # -- hosts -------------------------------------------------------------------------------

    def start_host(self, name: str) -> SimHost:
        """Start (or restart, under a new owner) the daemon of machine slot `name`."""
        number = self.instances.get(name, 0) + 1
        self.instances[name] = number
        owner = name if number == 1 else f"{name}.{number}"
        host = SimHost(
            name,
            owner,
            self.open_log(),
            self.plan,
            self.machine,
            settings=self.settings,
            bindings=bindings(self.generation),
            is_alive=self.is_alive,
        )
        with self.plan.disarmed():
            host.service.admission.configure_budgets(budgets())
            if self.shape.flow:  # recorded at open, as `Config.flow` is by `rota run`
                host.service.admission.configure_flow(flow_config(self.workload.share))
        self.hosts[name] = host
        return host

    def open_log(self) -> EventStore:
        """A new handle on the run's log (a connection of its own, for SQLite)."""
        if self.url.startswith("memory://"):
            return bootstrap.open_log(self.url, clock=self.clock)
        return open_store(self.url, clock=self.clock, synchronous="normal")

    def is_alive(self, owner: str) -> bool:
        return owner not in self.dead

    def kill(self, host: SimHost, where: str) -> None:
        """The host died (a crash): drop it; its calls die; restart it a while later."""
        host.alive = False
        host.store.dead = True
        self.dead.add(host.owner)
        self.machine.host_died(host.owner)
        self.count("crashes")
        self.workload.add(self.clock.t + self.random.uniform(1.0, 90.0), "start", host=host.name)

    def live_hosts(self) -> list[SimHost]:
        return [h for h in self.hosts.values() if h.alive and not h.stopped(self.clock.t)]

    def count(self, what: str) -> None:
        self.outcome.counts[what] = self.outcome.counts.get(what, 0) + 1

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Step until the horizon, a violation, or `until`; then settle and check the run
        at rest."""
        try:
            with quiet(), recording(self.checks.note_pass):
                self.loop(self.workload.horizon)
                if self.outcome.violation is None and self.until is None:
                    self.settle()
                    if self.outcome.violation is None:
                        self.outcome.violation = self.checks.at_rest()
        finally:
            self.finish()
        return self.outcome

    def loop(self, end: float) -> None:
        self.end = end
        while self.outcome.violation is None and self.clock.t < end:
            if self.until is not None and self.checks.position >= self.until:
                return
            self.step()
            self.outcome.violation = self.checks.after_step()

    def settle(self) -> None:
        """The storm ends: no more faults, chaos or workload; every host is started again
        and the deployment runs three leases on, then until nothing more happens at that
        moment. What holds "at rest" is checked after this."""
        self.plan.armed = False
        self.machine.faults = ExecutorFaults()
        for name, host in sorted(self.hosts.items()):
            host.paused_until = None
            if host.alive and host.store.broken:  # its connection is down: restart it
                self.kill(host, "to mend its store")
            if not host.alive:
                self.start_host(name)
        self.workload.actions.clear()  # (the restarts `kill` planned)
        self.loop(self.clock.t + 3 * self.settings.lease_seconds + 10.0)
        for _ in range(10_000):  # what is due at this very moment, and nothing later
            if self.outcome.violation is not None or not self.choices():
                return
            self.step(advance=False)
            self.outcome.violation = self.checks.after_step()

    def finish(self) -> None:
        outcome = self.outcome
        outcome.events = self.checks.position
        outcome.simulated_seconds = self.clock.t
        outcome.head_hash = self.log.head().hash if self.checks.position else ""
        outcome.faults = {**self.plan.counts, **self.machine.counts}
        if not self.keep:
            self.drop()

    def drop(self) -> None:
        """Let go of the run's log: forget a memory store; close an SQLite file's
        connections (the folder is the caller's)."""
        if self.url.startswith("memory://"):
            forget(self.url[len("memory://") :])
            return
        for host in self.hosts.values():
            host.store.inner.close()
        self.log.close()

    def export(self, path: Path) -> None:
        """Write the run's log as `rota export` writes one (the world was made with `keep`)."""
        export_to_file(self.log, path)
        self.drop()

    def choices(self) -> list[tuple[str, Any]]:
        """What can happen now: passes the daemon loops would run, launcher tasks, and
        processes whose end has come."""
        t, head = self.clock.t, self.log.head().position
        found: list[tuple[str, Any]] = []
        for host in self.live_hosts():
            if host.wants_pass(head, t):
                found.append(("pass", (host, head)))
            found.extend(("task", (host, i)) for i in range(len(host.pool.tasks)))
        found.extend(("end", proc) for proc in self.machine.due())
        return found

    def step(self, *, advance: bool = True) -> None:
        """Do one thing the seeded source picks, or move time on (module docstring)."""
        self.outcome.steps += 1
        action = self.workload.pop_due(self.clock.t)
        if action is not None:
            self.act(action.kind, action.args)  # one action a step
            return
        choices = self.choices()
        if not choices:
            if advance:
                self.advance()
            return
        kind, subject = choices[self.random.randrange(len(choices))]
        if kind == "pass":
            host, head = subject
            self.guarded(host, lambda: self.pass_of(host, head))
        elif kind == "task":
            host, index = subject
            self.guarded(host, lambda: host.pool.run(index))
        else:
            self.machine.finish(subject)

    def preempt(self, owner: str) -> None:
        """Between a decision of `owner` and its append, another host takes one step (a
        pass, or a task of its launcher), as a concurrent session would."""
        others = [c for c in self.choices() if c[0] != "end" and c[1][0].owner != owner]
        action = self.workload.peek_due(self.clock.t)
        if action is not None:
            others.append(("act", (None, action)))  # a client's or operator's call
        if not others:
            return
        self.count("interleavings")
        kind, subject = others[self.random.randrange(len(others))]
        host = subject[0]
        if kind == "act":
            taken = self.workload.pop_due(self.clock.t)
            assert taken is subject[1]
            perform(self, taken.kind, taken.args, besides=owner)
        elif kind == "pass":
            self.guarded(host, lambda: self.pass_of(host, subject[1]))
        else:
            self.guarded(host, lambda: host.pool.run(subject[1]))

    def pass_of(self, host: SimHost, head: int) -> None:
        report = host.tick()
        failed = report is None
        if report is not None:
            self.checks.note_report(host, report)
        host.after_pass(head, self.clock.t, failed)

    def guarded(self, host: SimHost, fn: Any) -> None:
        """Run host code; a simulated crash kills the host; any other escape is noted."""
        try:
            fn()
        except SimCrash as crash:
            self.kill(host, crash.where)

    def advance(self) -> None:
        """Nothing can happen now: move true time to the next moment something can."""
        t = self.clock.t
        moments = [self.end]
        upcoming = self.workload.next_at()
        if upcoming is not None:
            moments.append(upcoming)
        end = self.machine.next_end()
        if end is not None:
            moments.append(end)
        for host in self.hosts.values():
            if host.alive:
                paused = host.paused_until if host.stopped(t) else None
                moments.append(paused if paused is not None else host.due_at)
        nxt = min(m for m in moments if m is not None)
        self.clock.advance_to(max(nxt, t + 0.001))

    def act(self, kind: str, args: dict[str, Any]) -> None:
        """Perform one action of the workload (`rota.testing.sim.operations`)."""
        perform(self, kind, args)


@contextlib.contextmanager
def recording(sink: Any) -> Iterator[None]:
    """Every start pass the engine plans meanwhile is handed to `sink` (a `PassRecord`),
    for the invariants of the pass's choices (`rota.testing.sim.invariants.passes`)."""
    original = admission.plan_starts
    admission.plan_starts = plan_recorder(original, sink)
    try:
        yield
    finally:
        admission.plan_starts = original


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """rota's own log lines are off during a run (a run makes hundreds of thousands)."""
    loggers = [logging.getLogger(name) for name in LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


__all__ = ["Outcome", "World"]
