"""Simulated executors over a simulated machine: what really runs, and what they say.

`Machine` is the truth the world keeps about processes: which attempt each belongs to,
whether it waits to be allowed to start, runs, finished (with its result kept until
forgotten) or was killed, and when it ends. Executors answer from that truth, as a
correct executor answers from the operating system: rota's guarantees are about what
the scheduler does with honest evidence, so the simulated evidence is honest, and "no
evidence" (`unknown`) is one of the answers a seed may choose.

Three kinds, two as rota's own and one as many others' executors are:
- `SimCalls` (pool `agents`, like the in-process executor): a call lives in the host
  process that launched it; it dies with that host; it cannot be adopted by another.
- `SimJobs` (pool `jobs`, like the shell executor): a detached process that outlives its
  host. Its launch creates the process held back, persists its recovery metadata, then
  lets it start (`isolates`); recovery finds it through that metadata and attaches to it,
  reports its kept result, says it never started, or that it is gone; `stop` kills it.
- `SimEager` (pool `jobs`, not isolating): a detached process started BEFORE its metadata
  is persisted, as an executor that cannot hold its process back does. A crash between
  the start and the persist leaves a process no record finds; a quick one finishes, and
  reports, before its launch has returned.

The world injects executor faults through `ExecutorFaults`: a definite launch error
(nothing started), an ambiguous one (raised after the process started), a launch that
returns without persisting its metadata, a crash of the host inside the launch, a slow
or hung process, and recovery or stop answering "unknown".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any, Literal, NoReturn

from rota.application.errors import ExecutorError
from rota.application.ports import Done, Executor, LaunchContext, Recovery, StopEvidence
from rota.domain.results import Result
from rota.testing.sim.faults import roll

ProcState = Literal["held", "running", "finished", "killed", "abandoned"]


@dataclass
class Proc:
    """One process (or call) of one attempt, as the machine knows it."""

    pid: int
    execution_id: str
    epoch: int
    host: str  # the host instance that launched it (a call dies with it)
    detached: bool
    state: ProcState = "held"
    ends_at: float = 0.0
    result: Result | None = None
    reporter: Done | None = None  # whom it reports to (None: nobody watches it)
    kept: bool = False  # a finished detached process's result is on disk until forgotten


@dataclass
class ExecutorFaults:
    """How often each executor fault happens, per launch or per answer."""

    launch_error: float = 0.0
    launch_ambiguous: float = 0.0
    unacknowledged: float = 0.0
    crash_in_launch: float = 0.0
    hung: float = 0.0
    slow: float = 0.0
    recover_unknown: float = 0.0
    stop_unknown: float = 0.0
    finish_in_launch: float = 0.0

    @classmethod
    def default(cls) -> ExecutorFaults:
        return cls(
            launch_error=0.02,
            launch_ambiguous=0.01,
            unacknowledged=0.01,
            crash_in_launch=0.005,
            hung=0.01,
            slow=0.05,
            recover_unknown=0.05,
            stop_unknown=0.1,
            finish_in_launch=0.1,
        )


@dataclass
class Machine:
    """Every process of a run, and the seeded source deciding their lengths and results."""

    random: Random
    faults: ExecutorFaults
    now: Callable[[], float]  # true time
    procs: dict[int, Proc] = field(default_factory=dict)
    next_pid: int = 1
    fail_rate: float = 0.2
    counts: dict[str, int] = field(default_factory=dict)

    def chance(self, kind: str) -> bool:
        return roll(self.random, getattr(self.faults, kind), kind, self.counts)

    def spawn(self, ctx: LaunchContext, host: str, *, detached: bool) -> Proc:
        proc = Proc(self.next_pid, ctx.execution_id, ctx.epoch, host, detached)
        self.next_pid += 1
        self.procs[proc.pid] = proc
        return proc

    def start(self, proc: Proc, reporter: Done | None) -> None:
        """The process begins its work now; when it ends is decided here."""
        length = self.random.choice((0.5, 2.0, 5.0, 20.0, 90.0))
        if self.chance("slow"):
            length *= 40
        if self.chance("hung"):
            length = float("inf")
        proc.state, proc.ends_at, proc.reporter = "running", self.now() + length, reporter

    def due(self) -> list[Proc]:
        """Running processes whose end has come, in pid order."""
        t = self.now()
        return [p for p in self.procs.values() if p.state == "running" and p.ends_at <= t]

    def next_end(self) -> float | None:
        ends = [p.ends_at for p in self.procs.values() if p.state == "running"]
        return min(ends) if ends else None

    def finish(self, proc: Proc) -> None:
        """The process ended: decide its result and report it to whoever watches it."""
        failed = self.random.random() < self.fail_rate
        usage = {"tokens": float(self.random.randint(1, 50))}
        if failed:
            code = self.random.choice((1, 2))  # a shell command's exit status
            result = Result(outcome="failed", error_code=f"exit_{code}", usage=usage)
        else:
            result = Result(outcome="completed", data={"pid": proc.pid}, usage=usage)
        proc.state, proc.result, proc.kept = "finished", result, proc.detached
        if proc.reporter is not None:
            reporter, proc.reporter = proc.reporter, None
            reporter(result)

    def host_died(self, host: str) -> None:
        """A host crashed: its calls die with it; detached processes run on unwatched."""
        for proc in self.procs.values():
            if proc.host != host:
                continue
            if not proc.detached and proc.state in ("held", "running"):
                proc.state = "killed"
            proc.reporter = None

    def running(self, execution_id: str) -> list[Proc]:
        """What of the attempt still runs (or may start), whatever its epoch."""
        return [
            p
            for p in self.procs.values()
            if p.execution_id == execution_id and p.state in ("held", "running")
        ]


class SimExecutor(Executor):
    """The behaviour both simulated kinds share (module docstring)."""

    detached = False

    def __init__(
        self,
        machine: Machine,
        host: str,
        is_alive: Callable[[str], bool],
        crash: Callable[[str], NoReturn],
    ) -> None:
        self.machine = machine
        self.host = host  # this host instance's name
        self.is_alive = is_alive  # whether a host instance is alive (for "owner gone")
        self.crash = crash  # kill this host here (its store refuses every later call)
        self.closed = False

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        machine = self.machine
        with ctx.phase("executor"):
            if machine.chance("launch_error"):
                raise ExecutorError("simulated: the executor could not start anything")
            proc = machine.spawn(ctx, self.host, detached=self.detached)
            if self.detached:
                if machine.chance("crash_in_launch"):
                    self.crash("inside a launch, before its pin")
                if not machine.chance("unacknowledged"):
                    try:
                        ctx.persist_recovery({"pid": proc.pid})
                    except BaseException:
                        proc.state = "abandoned"  # held back: it never starts
                        raise
                else:
                    proc.state = "abandoned"  # nothing pinned: the wrapper gives up
                    return
            machine.start(proc, done)
            if machine.chance("crash_in_launch"):
                self.crash("inside a launch, after its start")
            if machine.chance("launch_ambiguous"):
                raise RuntimeError("simulated: the launch failed after starting its process")

    def _own(self, execution_id: str) -> Proc | None:
        """The attempt's process this host instance launched and still runs, if any."""
        for proc in self.machine.running(execution_id):
            if proc.host == self.host and proc.state == "running":
                return proc
        return None

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        proc = self._own(execution_id)
        if proc is None or self.closed:
            return False
        proc.ends_at = min(proc.ends_at, self.machine.now())  # it stops at its next step
        return True

    def close(self) -> None:
        self.closed = True


class SimCalls(SimExecutor):
    """Calls in the host process (pool `agents`): they die with it (module docstring)."""

    name = "sim-calls"
    pool = "agents"
    capabilities = frozenset({"stop", "interrupt"})

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        own = self._own(ctx.execution_id)
        if own is not None:
            own.reporter = done
            return "attached"
        if self.machine.chance("recover_unknown"):
            return "unknown"
        others = self.machine.running(ctx.execution_id)
        if any(self.is_alive(p.host) for p in others):
            return "unknown"  # it may still run in a live process elsewhere
        return "stopped"

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        if self.machine.chance("stop_unknown"):
            return "unknown"
        left = self.machine.running(execution_id)
        for proc in left:
            if proc.host == self.host:
                proc.ends_at = min(proc.ends_at, self.machine.now())  # cancelled: it ends
                proc.reporter = None
        return "unknown" if left else "stopped"


class SimJobs(SimExecutor):
    """Detached processes (pool `jobs`) that outlive their host (module docstring)."""

    name = "sim-jobs"
    pool = "jobs"
    capabilities = frozenset({"stop", "interrupt", "recover"})
    isolates = True
    stable = True
    detached = True

    def _proc(self, metadata: Any) -> Proc | None:
        if not isinstance(metadata, dict) or not isinstance(metadata.get("pid"), int):
            return None
        return self.machine.procs.get(metadata["pid"])

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        proc = self._proc(metadata)
        if proc is None or proc.execution_id != ctx.execution_id:
            return "unknown"
        if self.machine.chance("recover_unknown"):
            return "unknown"
        if proc.state in ("held", "abandoned"):
            proc.state = "abandoned"  # it can never start now
            return "not_started"
        if proc.state == "running":
            proc.reporter, proc.host = done, self.host
            return "attached"
        if proc.state == "finished" and proc.kept and proc.result is not None:
            done(proc.result)
            return "attached"
        return "stopped"

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        proc = self._proc(metadata)
        if proc is None:
            return "unknown"
        if self.machine.chance("stop_unknown"):
            return "unknown"
        if proc.state in ("held", "running"):
            proc.state, proc.reporter = "killed", None
        elif proc.state == "abandoned":
            pass
        proc.kept = False
        return "stopped"

    def forget(self, execution_id: str, epoch: int) -> None:
        for proc in self.machine.procs.values():
            if proc.execution_id == execution_id and proc.state == "finished":
                proc.kept = False

    quick_forget = True


class SimEager(SimJobs):
    """Detached processes started before their metadata is persisted (module docstring)."""

    name = "sim-eager"
    isolates = False

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        machine = self.machine
        with ctx.phase("executor"):
            if machine.chance("launch_error"):
                raise ExecutorError("simulated: the executor could not start anything")
            proc = machine.spawn(ctx, self.host, detached=True)
            machine.start(proc, done)
            if machine.chance("finish_in_launch"):
                machine.finish(proc)  # over already: it reports from inside `launch`
            if machine.chance("crash_in_launch"):
                self.crash("inside a launch, between its start and its persist")
            if machine.chance("unacknowledged"):
                return
            try:
                ctx.persist_recovery({"pid": proc.pid})
            except Exception:
                if proc.state == "running":  # it could not be pinned: kill what it started
                    proc.state, proc.reporter = "killed", None
                raise
