"""The host: one cadence that drives the scheduler (`rota run`, `Scheduler.tick()`).

One pass, in a fixed order (seed 002): runtime recovery, lost retry, schedules (slots
later issues fill), then due retry timers, observing finished attempts, timing out
attempts past their deadline, renewing held leases, and starting ready Work. A tick that
finds another tick running returns at once (re-entrant ticks coalesce).

Launches run off the loop on a launcher pool, outside any store transaction, under the
lease the claim took; the loop keeps renewing every held lease every third of the lease
duration, so a launch slower than the lease keeps it. When a renewal is refused the
launch's `ctx.cancel` is set with `ctx.cancel_reason` a `LeaseLost`.

`run()` sleeps until something can happen: a commit to the log (from any process), a
finished attempt, the next renewal, deadline or retry timer. It stops on request
(SIGTERM/SIGINT in the daemon) and releases the leases it holds.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rota.application.host_steps import HostOperations
from rota.application.ports import Executor, LaunchContext
from rota.application.service import Claimed, SchedulerService, StartPass, Waiting
from rota.domain.errors import LeaseLost, Refusal, RotaError
from rota.domain.results import Result
from rota.domain.state import AttemptState, WorkState

log = logging.getLogger("rota.host")
Environment = Callable[[WorkState, AttemptState], dict[str, str]]
# A start gate: (work, binding, first input) -> None or True to let the start go on, or a
# hold (any object with a `reason`, or a string); raising fails closed (nothing is held).
Gate = Callable[[WorkState, Any, Any], Any]


@dataclass
class Held:
    """An attempt this host holds the lease of, and how to reach its launch."""

    execution_id: str
    epoch: int
    ctx: LaunchContext
    executor: Executor
    renew_at: datetime
    deadline: datetime


@dataclass
class TickReport:
    """What one cadence pass did."""

    coalesced: bool = False
    fired: int = 0
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


class Host(HostOperations):
    """Drives one scheduler service with its executors."""

    def __init__(
        self,
        service: SchedulerService,
        executors: dict[str, Executor],
        *,
        environment: Environment | None = None,
        launch_workers: int = 8,
        start_batch: int = 256,
        recovery_page: int = 16,
    ) -> None:
        self.service = service
        self.executors = executors
        self.environment = environment
        self.start_batch = start_batch
        self.recovery_page = recovery_page
        self.historical: dict[tuple[str, str], Executor] = {}
        self.gates: dict[str, Gate] = {}
        self.held: dict[str, Held] = {}
        self.results: queue.SimpleQueue[tuple[str, int, Result]] = queue.SimpleQueue()
        self.stopping: dict[str, tuple[int, Executor, object]] = {}
        self._stop_next: dict[str, float] = {}
        self.wake = threading.Event()
        self.last_waiting: list[Waiting] = []
        self.launching: set[str] = set()
        self._tick_lock = threading.Lock()
        self._held_lock = threading.Lock()
        self._launcher = ThreadPoolExecutor(
            max_workers=launch_workers, thread_name_prefix="rota-launch"
        )
        self._closed = False

    # -- the cadence ------------------------------------------------------------------

    def tick(self) -> TickReport:
        if not self._tick_lock.acquire(blocking=False):
            return TickReport(coalesced=True)
        try:
            report = TickReport()
            self.service.catch_up()
            self._observe(report)
            self._renew(report)
            # The fixed order (seed 002): runtime recovery, lost retry (the retry timers),
            # schedules (a later slot), then starting ready Work. When recovery or retry
            # fails, this pass starts nothing new; the next pass tries again.
            try:
                self._recover(report)
            except RotaError as exc:
                report.errors.append(f"runtime recovery: {exc.code}: {exc}")
                return report
            try:
                report.fired = self.service.lifecycle.fire_due_timers()
            except RotaError as exc:
                report.errors.append(f"retry timers: {exc.code}: {exc}")
                return report
            try:
                report.settled = self.service.admission.settle_pass()
            except RotaError as exc:
                report.errors.append(f"budget settlement: {exc.code}: {exc}")
            self._time_out(report)
            self._confirm_stops(report)
            self._dispatch(report)
            self._start(report)
            return report
        finally:
            self._tick_lock.release()

    def _observe(self, report: TickReport) -> None:
        batch: list[tuple[str, int, Result]] = []
        while True:
            try:
                batch.append(self.results.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return
        refused = self.service.lifecycle.finish_many(batch)
        for execution_id, epoch, _ in batch:
            with self._held_lock:
                held = self.held.get(execution_id)
                if held is not None and held.epoch == epoch:
                    del self.held[execution_id]
            if execution_id in refused:
                log.info("result of %s refused: %s", execution_id, refused[execution_id])
            else:
                report.finished += 1
                self._forget(execution_id, epoch)

    def _forget(self, execution_id: str, epoch: int) -> None:
        """The outcome is durable: let the executor drop what it kept for recovery."""
        found = self.service.projection.attempt(execution_id)
        executor = self.executor_for(found[1]) if found is not None else None
        if executor is not None:
            self._launcher.submit(executor.forget, execution_id, epoch)

    def _time_out(self, report: TickReport) -> None:
        now = self.service.now()
        with self._held_lock:
            due = [h for h in self.held.values() if h.deadline <= now]
        for held in due:
            try:
                self.service.lifecycle.time_out(held.execution_id, held.epoch)
            except Refusal as refusal:
                log.info("timeout of %s refused: %s", held.execution_id, refusal)
                continue
            report.timed_out += 1
            self._drop(held, reason=None)
            self._request_stop(held.execution_id, held.epoch, held.executor)

    def _renew(self, report: TickReport) -> None:
        now = self.service.now()
        with self._held_lock:
            due = [h for h in self.held.values() if h.renew_at <= now]
        if not due:
            return
        refused = self.service.lifecycle.renew_many([(h.execution_id, h.epoch) for h in due])
        third = timedelta(seconds=self.service.settings.lease_seconds / 3)
        for held in due:
            refusal = refused.get(held.execution_id)
            if refusal is None:
                held.renew_at = now + third
                report.renewed += 1
            elif isinstance(refusal, LeaseLost):
                report.lost += 1
                if self.service.recovery.adoptable(held.execution_id, held.epoch):
                    # Still running and still the Work's: it belongs to recovery, which
                    # adopts it; stopping the process here could lose finished work.
                    self._drop(held, reason=None, cancel=False)
                else:
                    self._drop(held, reason=refusal)

    def _drop(self, held: Held, reason: BaseException | None, cancel: bool = True) -> None:
        with self._held_lock:
            if self.held.get(held.execution_id) is held:
                del self.held[held.execution_id]
        if reason is not None:
            held.ctx.cancel_reason = reason
        if cancel:
            held.ctx.cancel.set()

    def _start(self, report: TickReport) -> None:
        gated = bool(self.gates)
        start = self.service.lifecycle.start_pass(self.start_batch, gated=gated)
        if start.asks:
            # Ask the gates outside any store transaction, then admit with their answers.
            decisions = {work_id: self._ask_gates(work_id) for work_id in start.asks}
            again = self.service.lifecycle.start_pass(
                self.start_batch, gated=gated, gates=decisions
            )
            start = StartPass([*start.claimed, *again.claimed], again.waiting, again.asks)
        report.waiting = start.waiting
        self.last_waiting = start.waiting
        if start.claimed:
            self._launch_claimed(start.claimed)
        report.started += len(start.claimed)

    def _launch_claimed(self, claims: list[Claimed]) -> None:
        """Write invoke markers and launch (or resolve the environment first, off the loop)."""
        direct: list[Claimed] = []
        for claimed in claims:
            if self.environment is None:
                direct.append(claimed)
            else:
                with self._held_lock:
                    self.launching.add(claimed.attempt.execution_id)
                self._launcher.submit(self._prepare_and_launch, claimed)
        if direct:
            # An isolating executor holds every process until its launch is pinned, so a
            # lost lease before the pin relaunches instead of adopting (rota.domain.recovery).
            refused = self.service.lifecycle.invoke_many(
                [(c.attempt.execution_id, c.attempt.epoch) for c in direct],
                [self._isolates(c.attempt) for c in direct],
            )
            for claimed in direct:
                if claimed.attempt.execution_id not in refused:
                    self._launch(claimed, {})

    def _prepare_and_launch(self, claimed: Claimed) -> None:
        try:
            self._prepare(claimed)
        finally:
            with self._held_lock:
                self.launching.discard(claimed.attempt.execution_id)
            self.wake.set()

    def _prepare(self, claimed: Claimed) -> None:
        attempt = claimed.attempt
        execution_id = attempt.execution_id
        assert self.environment is not None
        try:
            self.service.lifecycle.phase(execution_id, attempt.epoch, "environment", None)
            env = self.environment(claimed.work, attempt)
            self.service.lifecycle.phase(execution_id, attempt.epoch, "environment", "ok")
        except Refusal:
            return
        except Exception:
            log.warning("run environment of %s unavailable", execution_id, exc_info=True)
            try:
                self.service.lifecycle.phase(execution_id, attempt.epoch, "environment", "failed")
                self.service.lifecycle.finish(
                    execution_id,
                    attempt.epoch,
                    Result(
                        outcome="failed",
                        error_code="environment_unavailable",
                        error_message="run environment unavailable",
                    ),
                )
            except Refusal:
                pass
            self.wake.set()
            return
        try:
            self.service.lifecycle.invoke(execution_id, attempt.epoch, self._isolates(attempt))
        except Refusal:
            return
        self._launch(claimed, env)

    def _isolates(self, attempt: AttemptState) -> bool:
        executor = self.executor_for(attempt)
        return executor is not None and executor.isolates

    def _context(self, attempt: AttemptState, env: dict[str, str], resume: bool) -> LaunchContext:
        execution_id, epoch, service = attempt.execution_id, attempt.epoch, self.service
        # The binding's environment first, then the run-environment hook's values over it.
        env = {**service.secrets_for(attempt), **env}
        return LaunchContext(
            work_id=attempt.work_id,
            attempt=attempt.number,
            epoch=epoch,
            inputs=[p.payload for p in attempt.consumed],
            input_positions=[p.position for p in attempt.consumed],
            config=dict(attempt.pinned.binding.config),
            deadline=attempt.deadline,
            env=env,
            resume=resume,
            persist=lambda metadata: service.lifecycle.persist_recovery(
                execution_id, epoch, metadata
            ),
            record_phase=lambda name, outcome: service.lifecycle.phase(
                execution_id, epoch, name, outcome
            ),
        )

    def _hold(self, attempt: AttemptState, ctx: LaunchContext, executor: Executor) -> Held:
        """Renew this attempt's lease on every pass from now on (until it is dropped)."""
        third = timedelta(seconds=self.service.settings.lease_seconds / 3)
        held = Held(
            attempt.execution_id,
            attempt.epoch,
            ctx,
            executor,
            self.service.now() + third,
            attempt.deadline,
        )
        with self._held_lock:
            self.held[attempt.execution_id] = held
        return held

    def _done(self, held: Held) -> Callable[[Result], None]:
        def done(result: Result) -> None:
            self.results.put((held.execution_id, held.epoch, result))
            self.wake.set()

        return done

    def _launch(self, claimed: Claimed, env: dict[str, str]) -> None:
        attempt = claimed.attempt
        executor = self.executor_for(attempt)
        ctx = self._context(attempt, env, claimed.resume)
        if executor is None:
            failure = Result(
                outcome="failed",
                error_code="unsupported_generation",
                error_message=f"no executor {attempt.pinned.registration.name!r} for "
                f"configuration generation {attempt.pinned.generation} in this process",
            )
            self.results.put((attempt.execution_id, attempt.epoch, failure))
            return
        done = self._done(self._hold(attempt, ctx, executor))
        if getattr(executor, "inline", False):
            self._call_launch(executor, ctx, done)
        else:
            self._launcher.submit(self._call_launch, executor, ctx, done)

    def _call_launch(
        self, executor: Executor, ctx: LaunchContext, done: Callable[[Result], None]
    ) -> None:
        try:
            executor.launch(ctx, done)
        except LeaseLost:
            ctx.cancel.set()
        except Exception:
            log.warning(
                "executor %s failed to launch %s", executor.name, ctx.execution_id, exc_info=True
            )
            done(
                Result(
                    outcome="failed",
                    error_code="executor_error",
                    error_message=f"executor {executor.name!r} could not launch",
                )
            )

    # -- waiting ----------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing running (here or elsewhere: a live attempt of a lost host still needs
        recovery), nothing startable, no result waiting, no timer due now."""
        if self.held or self.launching or not self.results.empty() or self.stopping:
            return False
        projection = self.service.projection
        if projection.live:
            return False
        now = self.service.now()
        if any(due <= now for due in projection.timers.values()):
            return False
        blocked = {w.work_id for w in self.last_waiting if not w.code.startswith("capacity")}
        return not (projection.startable - blocked)

    def next_wake(self, default: float = 5.0) -> float:
        """Seconds until the next renewal, deadline or retry timer (at most `default`)."""
        now = self.service.now()
        candidates = [default]
        with self._held_lock:
            for held in self.held.values():
                candidates.append((held.renew_at - now).total_seconds())
                candidates.append((held.deadline - now).total_seconds())
        due = self.service.projection.next_due()
        if due is not None:
            candidates.append((due - now).total_seconds())
        # Another host's lease expiring is a moment to recover its attempt.
        # (Only future expiries: one that recovery cannot act on must not make us spin.)
        for _, attempt in self.service.projection.live_attempts():
            if attempt.execution_id not in self.held and attempt.lease_expires_at > now:
                candidates.append((attempt.lease_expires_at - now).total_seconds())
        return max(0.0, min(candidates))

    def release_all(self) -> None:
        """Release every held lease (graceful stop); the attempts become recoverable."""
        with self._held_lock:
            held = list(self.held.values())
            self.held.clear()
        for item in held:
            with contextlib.suppress(Refusal):
                self.service.lifecycle.release(item.execution_id, item.epoch, "host_stopped")
            item.ctx.cancel_reason = LeaseLost("the host stopped and released the lease")
            item.ctx.cancel.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.release_all()
        self._launcher.shutdown(wait=True, cancel_futures=True)
        for executor in self.executors.values():
            executor.close()
