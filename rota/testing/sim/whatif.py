"""What-if from history: a recorded log's workload replayed under another configuration.

`replay(recording, plan)` runs the real engine (one `SchedulerService` and `Host`, as
`rota run` composes them) over a fresh in-memory log, with a `SimClock` starting at the
recording's first event. It submits each Work (and each later input, and performs each
operator's command: cancel, retry, release a hold, interrupt) at its recorded time, and
launches every attempt on a `ReplayExecutor` registered under the recorded
registration's name, pool and capabilities: the attempt takes the recorded attempt's
duration (claim to outcome) and ends with its recorded outcome. What the engine decides
(admission, retries, holds) is left to the engine under `plan`'s settings, bindings and
budgets; the replay's own log is then read with the same fold as the recording
(`rota.testing.sim.recorded.read_events`).

The run is deterministic and has no faults: one host, launcher tasks run in the order
they were handed over, processes end in time order, and time moves only when nothing can
happen now. It stops once nothing is due and every Work is settled.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rota import bootstrap
from rota.application.executor_directory import registration_of
from rota.application.host import Host
from rota.application.ports import Done, Executor, LaunchContext, Recovery, StopEvidence
from rota.application.queries import Queries
from rota.application.service import SchedulerService
from rota.domain.errors import RotaError
from rota.domain.events.admission import Budget
from rota.domain.policy import Binding, Registration, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.memory.backend import forget
from rota.testing.sim.clock import SimClock
from rota.testing.sim.pool import SimPool
from rota.testing.sim.recorded import Attempt, Recording, Work, read_events
from rota.testing.sim.world import quiet

_RUNS = itertools.count(1)
SETTLED = frozenset({"idle", "held", "completed", "failed", "cancelled"})
BY = "whatif"


@dataclass(frozen=True)
class Plan:
    """A configuration to replay under: what `rota run` takes from rota.toml."""

    settings: Settings
    bindings: dict[str, Binding]
    budgets: tuple[Budget, ...]
    source: str  # where it came from (a file, or "inferred from the log")


@dataclass(order=True)
class Proc:
    """One replayed attempt's process: it ends at `ends_at` with `result`."""

    ends_at: float
    seq: int
    execution_id: str = field(compare=False)
    result: Result = field(compare=False)
    done: Done = field(compare=False)


class Processes:
    """The replay's running processes, ended in time order (then in launch order)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.running: list[Proc] = []
        # (moment, attempt): a stop the log verified then is asked for again at that moment
        self.wakes: list[tuple[float, str]] = []
        self._seq = itertools.count(1)

    def start(self, execution_id: str, length: float, result: Result, done: Done) -> None:
        proc = Proc(self.now() + length, next(self._seq), execution_id, result, done)
        self.running.append(proc)
        self.running.sort()

    def next_end(self) -> float | None:
        return self.running[0].ends_at if self.running else None

    def finish_due(self) -> bool:
        """End the first process whose end has come (False: none has)."""
        if not self.running or self.running[0].ends_at > self.now():
            return False
        proc = self.running.pop(0)
        proc.done(proc.result)
        return True

    def drop(self, execution_id: str) -> bool:
        """A stop or a timeout: the process is killed, and reports nothing."""
        before = len(self.running)
        self.running = [p for p in self.running if p.execution_id != execution_id]
        return len(self.running) != before

    def has(self, execution_id: str) -> bool:
        return any(p.execution_id == execution_id for p in self.running)


class ReplayExecutor(Executor):
    """An executor whose attempts take their recorded duration and end with their
    recorded outcome (module docstring). Registered as the recorded registration."""

    def __init__(self, registration: Registration, recording: Recording, procs: Processes):
        self.name = registration.name
        self.pool = registration.pool
        self.capabilities = frozenset(registration.capabilities)
        self.recording = recording
        self.procs = procs

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        with ctx.phase("executor"):
            if "recover" in self.capabilities:
                ctx.persist_recovery({"replayed": ctx.execution_id})
            length, result = self.script(ctx.execution_id)
            self.procs.start(ctx.execution_id, length, result, done)

    def script(self, execution_id: str) -> tuple[float, Result]:
        """The recorded attempt's duration and result. An attempt number the log never
        reached takes the Work's last recorded attempt; a Work the log never started takes
        its binding's mean recorded duration and completes. An attempt still running when
        the log ended (or stopped by a cancel or an interrupt), and a timed-out one, run
        until the engine stops them or times them out: the log says no more of them."""
        work_id, _, number = execution_id.rpartition("/")
        work = self.recording.works.get(work_id)
        if work is None or not work.attempts:
            return self.mean(None if work is None else work.binding), Result(outcome="completed")
        attempt = _attempt(work, int(number))
        if attempt is None or attempt.duration is None or attempt.outcome == "timed_out":
            return float("inf"), Result(outcome="completed")
        if attempt.outcome in ("failed", "lost"):
            code = "lost" if attempt.outcome == "lost" else attempt.error_code
            failed = Result(
                outcome="failed", error_code=code, permanent=attempt.permanent,
                usage=attempt.usage,
            )  # fmt: skip
            return attempt.duration, failed
        return attempt.duration, Result(outcome="completed", data=attempt.data, usage=attempt.usage)

    def mean(self, binding: str | None) -> float:
        """The mean recorded duration of `binding`'s ended attempts (of all, if it has
        none; 0 if no attempt ended at all)."""
        ended = [
            (work.binding, attempt.duration)
            for work in self.recording.works.values()
            for attempt in work.attempts.values()
            if attempt.duration is not None
        ]
        own = [d for b, d in ended if b == binding] or [d for _, d in ended]
        return sum(own) / len(own) if own else 0.0

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        return "attached" if self.procs.has(ctx.execution_id) else "stopped"

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        """The process is killed at once; its stop is verified no sooner than the log
        verified it (a process takes a while to exit: until then the answer is unknown)."""
        self.procs.drop(execution_id)
        work_id, _, number = execution_id.rpartition("/")
        work = self.recording.works.get(work_id)
        attempt = None if work is None else work.attempts.get(int(number))
        confirmed = None if attempt is None else attempt.stop_confirmed_at
        if confirmed is not None and self.procs.now() < confirmed:
            self.procs.wakes.append((confirmed, execution_id))
            return "unknown"
        return "stopped"

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        return self.procs.drop(execution_id)


def _attempt(work: Work, number: int) -> Attempt | None:
    if number in work.attempts:
        return work.attempts[number]
    return work.attempts[max(work.attempts)] if work.attempts else None


def timeline(recording: Recording) -> list[tuple[float, int, str, Any]]:
    """What clients and operators did, in time order: submits (with the inputs accepted at
    the submit's moment), later inputs (a submit of the same Work), and operators'
    commands."""
    found: list[tuple[float, int, str, Any]] = []
    seq = itertools.count()
    for work in recording.works.values():
        first = [i for i in work.inputs if i.at <= work.submitted_at]
        found.append((work.submitted_at, next(seq), "submit", _submit(work, first)))
        for later in work.inputs[len(first) :]:
            found.append((later.at, next(seq), "submit", _submit(work, [later])))
    for t, kind, work_id, arg in recording.operations:
        found.append((t, next(seq), kind, (work_id, arg)))
    found.sort(key=lambda a: (a[0], a[1]))
    return found


def _submit(work: Work, inputs: list[Any]) -> SubmitWork:
    return SubmitWork(
        work_id=work.work_id,
        binding=work.binding,
        scope=work.scope,
        kind=work.kind,
        trigger=work.trigger,
        safety=work.safety,
        grants=work.grants,
        inputs=tuple(WorkInput(i.payload, i.key, i.correlation_key) for i in inputs),
    )


def replay(recording: Recording, plan: Plan, *, limit: float | None = None) -> Recording:
    """Run the recording's workload under `plan` (module docstring); the replay's log,
    read as a recording. `limit`: simulated seconds at most (default: ten times the
    recording's span plus a day)."""
    clock = SimClock(recording.start)
    procs = Processes(lambda: clock.t)
    executors: dict[str, Executor] = {
        name: ReplayExecutor(reg, recording, procs)
        for name, reg in sorted(recording.registrations.items())
    }
    url = f"memory://rota-whatif-{next(_RUNS)}"
    log = bootstrap.open_log(url, clock=clock)
    try:
        with quiet():
            service = bootstrap.build_service(
                log,
                settings=plan.settings,
                owner=BY,
                bindings=dict(plan.bindings),
                registrations={n: registration_of(n, e) for n, e in executors.items()},
            )
            if plan.budgets:
                service.admission.configure_budgets(list(plan.budgets))
            host = bootstrap.build_host(service, executors)
            pool = SimPool()
            host.launches.pool = pool
            end = limit if limit is not None else 10 * recording.end + 86_400.0
            skipped: list[str] = []
            _loop(service, host, pool, procs, clock, timeline(recording), end, skipped)
            events = log.read(0, limit=log.head().position + 1)
        found = read_events(events, "the replay")
        found.skipped = skipped
        return found
    finally:
        forget(url[len("memory://") :])


def _loop(
    service: SchedulerService,
    host: Host,
    pool: SimPool,
    procs: Processes,
    clock: SimClock,
    actions: list[tuple[float, int, str, Any]],
    end: float,
    skipped: list[str],
) -> None:
    """Step until nothing is due and every Work is settled (or `end`): due actions first,
    then launcher tasks, then ended processes, then a cadence pass when one is wanted."""
    due_at, seen = 0.0, -1
    host_queries = Queries(service, host)
    while clock.t <= end:
        t = clock.t
        if actions and actions[0][0] <= t:
            _, _, kind, arg = actions.pop(0)
            refused = perform(service, kind, arg)
            if refused is not None:
                skipped.append(f"at {t:.3f} s: {refused}")
            host.wake.set()
            continue
        if pool.tasks:
            pool.run(0)
            continue
        if procs.finish_due():
            continue
        for moment, execution_id in [w for w in procs.wakes if w[0] <= t]:
            procs.wakes.remove((moment, execution_id))
            host.stops.request(execution_id)
            host.wake.set()
        head = service.store.head().position
        if head != seen or host.wake.is_set() or not host.results.empty() or t >= due_at:
            host.wake.clear()
            host.tick()
            seen = head
            due_at = t + max(host.next_wake(5.0), 0.001)
            continue
        if not actions and procs.next_end() is None and _settled(host_queries):
            return
        moments = [due_at, end + 1.0]
        if actions:
            moments.append(actions[0][0])
        moments += [moment for moment, _ in procs.wakes]
        next_end = procs.next_end()
        if next_end is not None:
            moments.append(next_end)
        clock.advance_to(max(min(moments), t + 0.001))


def perform(service: SchedulerService, kind: str, arg: Any) -> str | None:
    """One client's or operator's command. A command the engine refuses here (the Work is
    not where it was in the log: it completed before a later input, there is nothing to
    retry or no hold to release) is skipped, as its client or operator would skip it, and
    described (returned) for the report."""
    try:
        if kind == "submit":
            service.lifecycle.submit(arg)
            return None
        work_id, detail = arg
        if kind == "cancel":
            service.admission.cancel(work_id, reason="as recorded", by=BY)
        elif kind == "retry":
            service.lifecycle.request_retry(work_id, requested_by=BY)
        elif kind == "release_hold":
            service.recovery.release_hold(work_id, kind=detail, by=BY)
        elif kind == "interrupt":
            service.control.interrupt(work_id, by=BY)
    except RotaError as refused:
        return f"{kind}: {refused}"
    return None


def _settled(queries: Queries) -> bool:
    """Whether every Work is settled (nothing left to start, run or retry)."""
    return queries.state.at_head(
        lambda projection, now: all(w.state in SETTLED for w in projection.works.values())
    ).value


__all__ = ["Plan", "Processes", "ReplayExecutor", "replay", "timeline"]
