"""The host: one cadence that drives the scheduler (`rota run`, `Scheduler.tick()`).

One pass observes finished attempts and renews held leases, then runs the fixed order of
seed 002: runtime recovery (one page of expired leases; an attempt whose recovery finds no
evidence is failed and stopped, not recovered again: `host_steps.RuntimeRecovery`), lost
retry (one page of due retry timers: a lost attempt of idempotent or deduplicated Work is
retried through the timer its lost transition armed, as every failure is), schedules (the
leader's fires of due nominal times, seed 003: `schedule_runner.ScheduleRunner`), then
budget settlement, timing out attempts past their deadline, stop verification, control
dispatch and starting ready Work. When recovery, lost retry or the schedules fail, the
pass starts nothing new; a step that found more than a page wakes the loop again at once.
Pages are 16 by default, at most 64 (`rota.domain.pages`). A tick that finds another tick
running returns at once (re-entrant ticks coalesce).

Launches run off the loop (a thread each, or a batch on the launch pool: `launches`), outside
any store transaction, under the claim's lease, which the loop renews every third of its
duration, so a slow launch keeps it; a refused renewal sets `ctx.cancel` (a `LeaseLost`).

Elapsed time is the clock's monotonic reading: a renewal is due a third of the lease after
the last by that reading or by wall time, whichever comes first, and an attempt this
process runs times out when its run time by that reading is spent and its wall deadline
is due, so a wall-clock step neither stops renewals nor times work out early. An attempt
this process runs whose lease lapsed anyway (a jump forward) is recovered with its run time
left (`Launches.running`) and adopted by this same host (docs/operator.md, "Clock jumps").

A pass's appends share one durability wait (`rota.application.pass_sync`): they are made
durable together at its end, and before anything outside the store acts on them (a
launch, a task on the launcher, a start gate); executors forget the results they kept only
once the pass's outcomes are durable.

`run()` sleeps until something can happen: a commit to the log (from any process), a
finished attempt, the next renewal, deadline or retry timer. It stops on request
(SIGTERM/SIGINT in the daemon) and releases the leases it holds.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rota.application.collection import fewer_collections
from rota.application.commands.lifecycle import StartPass
from rota.application.executor_directory import ExecutorDirectory
from rota.application.host_steps import (
    ControlDispatch,
    RuntimeRecovery,
    StartGates,
    StopVerification,
    finish_or_keep,
    first_of_each,
)
from rota.application.launches import Held, Launches
from rota.application.ports import Clock, Environment, Executor, Gate, TraceContext
from rota.application.schedule_runner import ScheduleRunner
from rota.application.service import GateDecision, SchedulerService, Waiting
from rota.domain.errors import LeaseLost, Refusal, RotaError
from rota.domain.results import Result

log = logging.getLogger("rota.host")
GATE_ROUNDS = 3  # how often one start step asks the gates (again when a trigger changed)
__all__ = ["Environment", "Gate", "Held", "Host", "TickReport"]


@dataclass
class TickReport:
    """What one cadence pass did."""

    coalesced: bool = False
    fired: int = 0
    scheduled: int = 0
    finished: int = 0
    timed_out: int = 0
    renewed: int = 0
    lost: int = 0
    started: int = 0
    recovered: int = 0
    relaunched: int = 0
    settled: int = 0
    dispatched: int = 0
    held: list[str] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Host:
    """Drives one scheduler service with its executors, in the cadence's fixed order.

    The steps are collaborators: `launches` (held leases, launches, results),
    `start_gates`, `runtime_recovery`, `stops` (stop verification) and
    `control_dispatch` (rota.application.host_steps).
    """

    def __init__(
        self,
        service: SchedulerService,
        executors: dict[str, Executor],
        *,
        environment: Environment | None = None,
        trace_context: TraceContext | None = None,
        start_batch: int = 256,
        recovery_page: int = 16,
        timer_page: int = 16,
        clock: Clock | None = None,
    ) -> None:
        self.service = service
        self.start_batch = start_batch
        self.timer_page = timer_page
        self.directory = ExecutorDirectory(service, executors)
        ticks = clock.monotonic if clock is not None else time.monotonic
        self.launches = Launches(
            service,
            self.directory,
            environment=environment,
            ticks=ticks,
            trace_context=trace_context,
        )
        self.start_gates = StartGates(service)
        self.stops = StopVerification(service, self.directory, self.launches)
        self.runtime_recovery = RuntimeRecovery(
            service, self.directory, self.launches, self.stops, page=recovery_page
        )
        self.control_dispatch = ControlDispatch(service, self.directory, self.launches)
        self.schedule_runner = ScheduleRunner(
            service.schedules, service.owner, ttl_seconds=service.settings.lease_seconds
        )
        self.last_waiting: list[Waiting] = []
        self.next_token: datetime | None = None
        self.starting = True  # False once draining or stopping: the start step is skipped
        self._tick_lock = threading.Lock()
        self._closed = False

    # What the facade and the daemon loop reach through the host.

    @property
    def executors(self) -> dict[str, Executor]:
        return self.directory.executors

    @property
    def historical(self) -> dict[tuple[str, str], Executor]:
        return self.directory.historical

    @property
    def gates(self) -> dict[str, Gate]:
        return self.start_gates.gates

    @property
    def held(self) -> dict[str, Held]:
        return self.launches.held

    def declare_compatible(self, generations: Mapping[str, frozenset[str] | None]) -> None:
        """Configuration generations whose executors (those named; None: every one) serve
        attempts pinned to them (the config file's `[[historical]]`)."""
        self.directory.compatible.update(generations)

    def keep_generation(self, before: str, executors: Mapping[str, Executor]) -> None:
        """Attempts pinned to the generation `before` (which a configuration change ends)
        keep `executors`, the implementations they were started with."""
        self.directory.keep(before, dict(executors))

    def serve_historical(self, generation: str, name: str, executor: Executor) -> None:
        """`executor` serves attempts of registration `name` pinned to `generation`."""
        with self.service.lock:
            self.directory.historical[(generation, name)] = executor

    def register_gate(self, name: str, gate: Gate) -> None:
        """Register a start gate under the service's lock (a start pass reads the gates)."""
        with self.service.lock:
            self.gates[name] = gate

    @property
    def results(self) -> queue.SimpleQueue[tuple[str, int, Result]]:
        return self.launches.results

    @property
    def wake(self) -> threading.Event:
        return self.launches.wake

    # -- the cadence ------------------------------------------------------------------

    def tick(self) -> TickReport:
        if not self._tick_lock.acquire(blocking=False):
            return TickReport(coalesced=True)
        forgets: list[tuple[str, int, Executor | None]] = []
        try:
            # The pass's appends share one durability wait, taken before anything outside
            # the store acts on them (rota.application.pass_sync).
            with self.launches.passes.one_pass(), fewer_collections():
                report = self._pass(forgets)
            # The outcomes it stored are durable now: their executors may drop what they kept.
            for execution_id, epoch, executor in forgets:
                self._forget(execution_id, epoch, executor)
            return report
        finally:
            self._tick_lock.release()

    def _pass(self, forgets: list[tuple[str, int, Executor | None]]) -> TickReport:
        report = TickReport()
        self.service.catch_up()
        self._observe(report, forgets)
        self._let_go_of_ended()
        self._renew(report)
        # The fixed order (seed 002): runtime recovery, lost retry (the retry timers),
        # schedules (rota.application.schedule_runner), then starting ready Work. When
        # recovery, retry or the schedules fail, this pass starts nothing new.
        try:
            self.runtime_recovery.run(report)
        except RotaError as exc:
            report.errors.append(f"runtime recovery: {exc.code}: {exc}")
            return report
        try:
            timers = self.service.lifecycle.fire_due_timers(self.timer_page)
        except RotaError as exc:
            report.errors.append(f"retry timers: {exc.code}: {exc}")
            return report
        report.fired = timers.fired
        if timers.has_more:
            self.wake.set()  # one page a pass: come back for the rest at once
        try:
            report.scheduled = self.schedule_runner.run().fired
        except RotaError as exc:
            report.errors.append(f"schedules: {exc.code}: {exc}")
            return report
        try:
            report.settled = self.service.admission.settle_pass()
        except RotaError as exc:
            report.errors.append(f"budget settlement: {exc.code}: {exc}")
        self._time_out(report)
        self.stops.run(report)
        self.control_dispatch.run(report)
        self._start(report)
        return report

    def _observe(self, report: TickReport, forgets: list[tuple[str, int, Executor | None]]) -> None:
        batch: list[tuple[str, int, Result]] = []
        while True:
            try:
                batch.append(self.results.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return
        batch, later = first_of_each(batch)
        for item in later:  # decided next pass, against what the first one recorded
            self.results.put(item)
        refused = finish_or_keep(self.service, self.results, batch)  # kept if it fails
        held, running = self.held, self.launches.running
        executors: list[Executor | None] = []  # the held attempts' (else looked up later)
        with self.launches.held_lock:  # once for the batch: no longer held, nor run here
            for execution_id, epoch, _ in batch:
                found = held.get(execution_id)
                if found is not None and found.epoch == epoch:
                    del held[execution_id]
                    executors.append(found.executor)
                else:
                    executors.append(None)
                if execution_id not in refused:
                    running.pop(execution_id, None)  # (`Launches.settled`)
        for (execution_id, epoch, _), executor in zip(batch, executors, strict=True):
            if execution_id not in refused:
                report.finished += 1
                forgets.append((execution_id, epoch, executor))
                continue
            log.info("result of %s refused: %s", execution_id, refused[execution_id])
            if not self.service.recovery.adoptable(execution_id, epoch):
                # Over (cancelled, timed out): nothing recovers it here. Its process has
                # just ended: a stop still to verify is checked again on this pass.
                self.launches.settled(execution_id)
                self.stops.request(execution_id)
                forgets.append((execution_id, epoch, executor))
            # Else its lease lapsed (a clock jump, a stalled host): recovery adopts it,
            # and the executor hands the result it kept to the new epoch.

    def _let_go_of_ended(self) -> None:
        """Stop holding attempts the log says ended (interrupted, cancelled) or moved to a
        newer epoch: there is no lease left to renew, and their executors were told."""
        projection = self.service.projection
        with self.launches.held_lock:
            holding = list(self.held.values())
            running = list(self.launches.running)
        for held in holding:
            found = projection.attempt(held.execution_id)
            if found is None or not found[1].live or found[1].epoch != held.epoch:
                self.launches.drop(held, reason=None, cancel=False)
        for execution_id in running:  # over: this process no longer runs it
            found = projection.attempt(execution_id)
            if found is None or not found[1].live:
                self.launches.settled(execution_id)

    def _forget(self, execution_id: str, epoch: int, executor: Executor | None = None) -> None:
        """The outcome is durable: let the executor drop what it kept for recovery (the
        attempt's pinned one: `executor` when the host held it, else looked up)."""
        if executor is None:
            found = self.service.projection.attempt(execution_id)
            executor = self.directory.executor_for(found[1]) if found is not None else None
        if executor is None or type(executor).forget is Executor.forget:
            return  # the default forgets nothing
        if executor.quick_forget:
            # Drops only what it keeps in memory: no thread of its own (a thread per
            # finished attempt was most of the cost of a short attempt's outcome).
            try:
                executor.forget(execution_id, epoch)
            except Exception:
                log.warning("forgetting %s failed", execution_id, exc_info=True)
            return
        self.launches.submit(executor.forget, execution_id, epoch)

    def _time_out(self, report: TickReport) -> None:
        # Due when both clocks say so: the run time (monotonic) is spent, and the wall
        # deadline the log holds is due (the domain's fence checks that one).
        now, ticks = self.service.now(), self.launches.ticks()
        with self.launches.held_lock:
            due = [h for h in self.held.values() if h.deadline <= now and h.budget_end <= ticks]
        for held in due:
            try:
                self.service.lifecycle.time_out(held.execution_id, held.epoch)
            except Refusal as refusal:
                log.info("timeout of %s refused: %s", held.execution_id, refusal)
                continue
            report.timed_out += 1
            self.launches.durable()  # the timeout is durable before its launch is cancelled
            self.launches.drop(held, reason=None)
            self.stops.request(held.execution_id)

    def _renew(self, report: TickReport) -> None:
        now, ticks = self.service.now(), self.launches.ticks()
        with self.launches.held_lock:
            due = [h for h in self.held.values() if h.renew_at <= now or h.renew_due <= ticks]
        if not due:
            return
        refused = self.service.lifecycle.renew_many([(h.execution_id, h.epoch) for h in due])
        third = self.service.settings.lease_seconds / 3
        for held in due:
            refusal = refused.get(held.execution_id)
            if refusal is None:
                held.renew_at = now + timedelta(seconds=third)
                held.renew_due = ticks + third
                report.renewed += 1
            elif isinstance(refusal, LeaseLost):
                report.lost += 1
                if held.launching:
                    # A launch still in progress ends at once, as under a LeaseHold (seed
                    # 001): it does not run on to its next fenced write.
                    self.launches.drop(held, reason=refusal)
                elif self.service.recovery.adoptable(held.execution_id, held.epoch):
                    # Launched, still running and still the Work's: it belongs to recovery,
                    # which adopts it; stopping the process here could lose finished work.
                    self.launches.drop(held, reason=None, cancel=False)
                else:
                    self.launches.drop(held, reason=refusal)

    def _start(self, report: TickReport) -> None:
        if not self.starting:
            return  # draining or stopping: start nothing new
        gated = bool(self.gates)
        invoke = self.launches.invoked_with_claim
        start = self.service.lifecycle.start_pass(self.start_batch, gated=gated, invoke=invoke)
        if start.judge and self.service.waits.judge(start.judge):
            # Named wait predicates judged new input (outside any write): admit again.
            again = self.service.lifecycle.start_pass(self.start_batch, gated=gated, invoke=invoke)
            start = StartPass([*start.claimed, *again.claimed], again.waiting, again.asks)
        decisions: dict[str, GateDecision] = {}
        for _ in range(GATE_ROUNDS):
            if not start.asks:
                break
            # Ask the gates outside any store transaction, then admit with their answers;
            # a Work whose trigger changed meanwhile is asked again (at most GATE_ROUNDS).
            self.launches.durable()  # (asking can have effects a person sees)
            decisions.update((work_id, self.start_gates.ask(work_id)) for work_id in start.asks)
            again = self.service.lifecycle.start_pass(
                self.start_batch, gated=gated, gates=decisions, invoke=invoke
            )
            start = StartPass([*start.claimed, *again.claimed], again.waiting, again.asks)
        if start.asks:
            self.wake.set()  # still to be asked: the next pass does
        report.waiting = start.waiting
        self.last_waiting = start.waiting
        self.next_token = start.next_token
        if start.claimed:
            self.launches.launch_claimed(start.claimed)
        report.started += len(start.claimed)

    # -- waiting ----------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing running (here or elsewhere: a live attempt of a lost host still needs
        recovery), nothing startable, no result waiting, no timer due now."""
        if self.busy() or not self.results.empty():
            return False
        projection = self.service.projection
        if projection.live:
            return False
        now = self.service.now()
        token = () if self.next_token is None else (self.next_token,)  # Work held for tokens
        if any(due <= now for due in (*projection.timers.values(), *token)):
            return False
        blocked = {w.work_id for w in self.last_waiting if not w.code.startswith("capacity")}
        return not (projection.startable - blocked)

    def next_wake(self, default: float = 5.0) -> float:
        """Seconds until the next renewal, deadline, retry timer, schedule fire or token
        (at most `default`)."""
        now, ticks = self.service.now(), self.launches.ticks()
        candidates = [default]
        with self.launches.held_lock:
            for held in self.held.values():
                wall = (held.renew_at - now).total_seconds()
                candidates.append(min(wall, held.renew_due - ticks))
                wall = (held.deadline - now).total_seconds()
                candidates.append(max(wall, held.budget_end - ticks))
        # A retry timer, a schedule fire, a token for Work held back by a rate.
        dues = (self.service.projection.next_due(), self.schedule_runner.next_due())
        for due in (*dues, self.next_token):
            if due is not None:
                candidates.append((due - now).total_seconds())
        # Another host's lease expiring is a moment to recover its attempt.
        # (Only future expiries: one that recovery cannot act on must not make us spin.)
        for _, attempt in self.service.projection.live_attempts():
            if attempt.execution_id not in self.held and attempt.lease_expires_at > now:
                candidates.append((attempt.lease_expires_at - now).total_seconds())
        return max(0.0, min(candidates))

    def busy(self) -> bool:
        """Whether this host still holds, launches or stops an attempt of its own."""
        return bool(self.held or self.launches.launching or self.stops.stopping)

    def release_all(self) -> None:
        """Release every held lease (graceful stop); the attempts become recoverable, and
        the schedule leader lease goes back (another runner fires at once)."""
        try:
            self.launches.release_all()
        finally:
            self.schedule_runner.release()

    def close(self) -> None:
        """A graceful stop: release every lease, leave adoptable work running (detach)."""
        if self._closed:
            return
        self._closed = True
        self.starting = False
        self.schedule_runner.release()
        self.launches.release_all(leave_running=True)
        self.launches.pool.shutdown(wait=True, cancel_futures=True)
        self.launches.batches.shutdown(wait=True)
        for executor in self.directory.all_executors():
            executor.detach()
