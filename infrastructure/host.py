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

from rota.domain.errors import LeaseLost, Refusal, RotaError
from rota.domain.results import Result
from rota.domain.state import AttemptState, WorkState

from .executors.base import Executor, LaunchContext
from .service import Claimed, SchedulerService, Waiting

log = logging.getLogger("rota.host")
Environment = Callable[[WorkState, AttemptState], dict[str, str]]


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
    waiting: list[Waiting] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Host:
    """Drives one scheduler service with its executors."""

    def __init__(
        self,
        service: SchedulerService,
        executors: dict[str, Executor],
        *,
        environment: Environment | None = None,
        launch_workers: int = 8,
        start_batch: int = 256,
    ) -> None:
        self.service = service
        self.executors = executors
        self.environment = environment
        self.start_batch = start_batch
        self.held: dict[str, Held] = {}
        self.results: queue.SimpleQueue[tuple[str, int, Result]] = queue.SimpleQueue()
        self.stopping: dict[str, tuple[int, Executor, object]] = {}
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
            # Slots of the fixed order: runtime recovery and lost retry come first; when
            # either fails, this pass starts nothing new.
            try:
                report.fired = self.service.fire_due_timers()
            except RotaError as exc:
                report.errors.append(f"retry timers: {exc.code}: {exc}")
                return report
            self._observe(report)
            self._time_out(report)
            self._renew(report)
            self._confirm_stops(report)
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
        refused = self.service.finish_many(batch)
        for execution_id, epoch, _ in batch:
            with self._held_lock:
                held = self.held.get(execution_id)
                if held is not None and held.epoch == epoch:
                    del self.held[execution_id]
            if execution_id in refused:
                log.info("result of %s refused: %s", execution_id, refused[execution_id])
            else:
                report.finished += 1

    def _time_out(self, report: TickReport) -> None:
        now = self.service.now()
        with self._held_lock:
            due = [h for h in self.held.values() if h.deadline <= now]
        for held in due:
            try:
                self.service.time_out(held.execution_id, held.epoch)
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
        refused = self.service.renew_many([(h.execution_id, h.epoch) for h in due])
        third = timedelta(seconds=self.service.settings.lease_seconds / 3)
        for held in due:
            refusal = refused.get(held.execution_id)
            if refusal is None:
                held.renew_at = now + third
                report.renewed += 1
            elif isinstance(refusal, LeaseLost):
                report.lost += 1
                self._drop(held, reason=refusal)

    def _drop(self, held: Held, reason: BaseException | None) -> None:
        with self._held_lock:
            if self.held.get(held.execution_id) is held:
                del self.held[held.execution_id]
        if reason is not None:
            held.ctx.cancel_reason = reason
        held.ctx.cancel.set()

    def _request_stop(self, execution_id: str, epoch: int, executor: Executor) -> None:
        found = self.service.projection.attempt(execution_id)
        metadata = found[1].recovery_metadata if found else None
        self.stopping[execution_id] = (epoch, executor, metadata)

    def _confirm_stops(self, report: TickReport) -> None:
        for execution_id, (epoch, executor, metadata) in list(self.stopping.items()):
            evidence = executor.stop(execution_id, epoch, metadata)
            if evidence != "stopped":
                continue
            del self.stopping[execution_id]
            try:
                self.service.confirm_stopped(execution_id, epoch)
            except Refusal as refusal:
                report.errors.append(f"confirm {execution_id}: {refusal.code}: {refusal}")

    def _start(self, report: TickReport) -> None:
        start = self.service.start_pass(self.start_batch)
        report.waiting = start.waiting
        self.last_waiting = start.waiting
        if not start.claimed:
            return
        direct: list[Claimed] = []
        for claimed in start.claimed:
            if self.environment is None:
                direct.append(claimed)
            else:
                with self._held_lock:
                    self.launching.add(claimed.attempt.execution_id)
                self._launcher.submit(self._prepare_and_launch, claimed)
        if direct:
            refused = self.service.invoke_many(
                [(c.attempt.execution_id, c.attempt.epoch) for c in direct]
            )
            for claimed in direct:
                if claimed.attempt.execution_id not in refused:
                    self._launch(claimed, {})
        report.started += len(start.claimed)

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
            self.service.phase(execution_id, attempt.epoch, "environment", None)
            env = self.environment(claimed.work, attempt)
            self.service.phase(execution_id, attempt.epoch, "environment", "ok")
        except Refusal:
            return
        except Exception:
            log.warning("run environment of %s unavailable", execution_id, exc_info=True)
            try:
                self.service.phase(execution_id, attempt.epoch, "environment", "failed")
                self.service.finish(
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
            self.service.invoke(execution_id, attempt.epoch)
        except Refusal:
            return
        self._launch(claimed, env)

    def _launch(self, claimed: Claimed, env: dict[str, str]) -> None:
        attempt = claimed.attempt
        execution_id = attempt.execution_id
        executor = self.executors.get(attempt.pinned.registration.name)
        epoch = attempt.epoch
        service = self.service
        ctx = LaunchContext(
            work_id=attempt.work_id,
            attempt=attempt.number,
            epoch=epoch,
            inputs=[p.payload for p in attempt.consumed],
            input_positions=[p.position for p in attempt.consumed],
            config=dict(attempt.pinned.binding.config),
            deadline=attempt.deadline,
            env=env,
            resume=claimed.resume,
            persist=lambda metadata: service.persist_recovery(execution_id, epoch, metadata),
            record_phase=lambda name, outcome: service.phase(execution_id, epoch, name, outcome),
        )
        if executor is None:
            self.results.put(
                (
                    execution_id,
                    epoch,
                    Result(
                        outcome="failed",
                        error_code="unsupported_generation",
                        error_message=f"executor {attempt.pinned.registration.name!r} "
                        "is not registered in this process",
                    ),
                )
            )
            return
        third = timedelta(seconds=service.settings.lease_seconds / 3)
        held = Held(execution_id, epoch, ctx, executor, service.now() + third, attempt.deadline)
        with self._held_lock:
            self.held[execution_id] = held

        def done(result: Result) -> None:
            self.results.put((execution_id, epoch, result))
            self.wake.set()

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
        """Nothing running, nothing startable, no result waiting, no timer due now."""
        if self.held or self.launching or not self.results.empty() or self.stopping:
            return False
        projection = self.service.projection
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
        return max(0.0, min(candidates))

    def release_all(self) -> None:
        """Release every held lease (graceful stop); the attempts become recoverable."""
        with self._held_lock:
            held = list(self.held.values())
            self.held.clear()
        for item in held:
            with contextlib.suppress(Refusal):
                self.service.release(item.execution_id, item.epoch, "host_stopped")
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
