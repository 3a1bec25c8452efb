"""The attempts a host holds and how they are launched, off the loop.

`Launches` owns what the cadence and its steps share about running attempts: the held
leases (`held`, renewed by the cadence every third of the lease), the results executors
report (`results`), the launcher that runs every launch, adoption, stop check and
control delivery outside any store transaction, and the `wake` event that ends the
daemon's sleep. Which executor serves an attempt, `Launches` asks the host's
`ExecutorDirectory` (`rota.application.executor_directory`).

The launcher gives every task a thread of its own (`TaskThreads`), so a stuck launch,
run-environment hook, adoption, stop check or control delivery never waits behind, or
holds up, another Work's launch or the cadence (seed 001: a host that must not block on
a launch launches elsewhere). How many run at once is bounded by what the log holds, not
by a pool size: a launch per claimed attempt (capacity-limited), a stop check per ended
attempt holding a slot (one at a time each), a delivery per dispatched control intent.
The one exception is a launch that cannot get stuck: an executor that declares
`batch_launch` (its launch waits only on its own processes and the store, each bounded:
the shell executor) gets a pass's launches as one batch, one task of the launch pool
(`batches`, a fixed pool of `LAUNCH_POOL_THREADS` threads, `rota.application.launch_calls`),
which pins their recovery metadata in one append: no thread is started per launch, and
the batch waits for the disk once.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor as Pool
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from rota.application.commands.lifecycle import Claimed
from rota.application.executor_directory import ExecutorDirectory
from rota.application.launch_calls import LAUNCH_POOL_THREADS, call_launch, call_launch_many
from rota.application.pass_sync import PassSync
from rota.application.personal import Unreadable
from rota.application.ports import Done, Environment, Executor, LaunchContext, TraceContext
from rota.application.service import SchedulerService
from rota.application.task_threads import TaskThreads
from rota.application.unrecorded_launch import unrecorded
from rota.domain.errors import LeaseLost, Refusal
from rota.domain.failures import FailureCode
from rota.domain.policy import Pinned
from rota.domain.results import Result
from rota.domain.state import AttemptState

log = logging.getLogger("rota.host")
P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class Held:
    """An attempt this host holds the lease of, and how to reach its launch."""

    execution_id: str
    epoch: int
    ctx: LaunchContext
    executor: Executor
    renew_at: datetime
    deadline: datetime
    # True from the claim until the executor's `launch` returned: a lost lease then cancels
    # the launch at once (seed 001); after it, a process still running belongs to recovery.
    launching: bool = False
    # Monotonic readings (the host's clock): the next renewal is due at `renew_due` or at
    # wall time `renew_at`, whichever comes first, so a wall-clock step back never stops
    # renewals; its run time is spent at `budget_end` (see `Launches.running`).
    renew_due: float = 0.0
    budget_end: float = float("inf")
    # True once the executor reported a result through `done` (a launch may finish at once).
    reported: bool = False


class Launches:
    """Held leases, launches and their results (see the module docstring)."""

    def __init__(
        self,
        service: SchedulerService,
        directory: ExecutorDirectory,
        *,
        environment: Environment | None = None,
        ticks: Callable[[], float] = time.monotonic,
        trace_context: TraceContext | None = None,
    ) -> None:
        self.service = service
        self.directory = directory
        self.environment = environment
        self.ticks = ticks  # the host's monotonic clock (`Clock.monotonic`)
        self.trace_context = trace_context
        self.held: dict[str, Held] = {}
        # The attempts this process runs (launched or adopted here, no outcome recorded
        # yet), by execution id: the monotonic reading at which its run time is spent. It
        # outlives a lost lease (unlike `held`): recovery of one of these is recovery of
        # this process's own work, with its run time measured here, not by the wall clock.
        self.running: dict[str, float] = {}
        self.held_lock = threading.Lock()
        self.launching: set[str] = set()
        self.results: queue.SimpleQueue[tuple[str, int, Result]] = queue.SimpleQueue()
        self.wake = threading.Event()
        # True while `launch_claimed` launches a batch on the loop's thread; `_reported`: a
        # result came in meanwhile (its `wake.set()` is left to the end of the batch).
        self._batching = False
        self._reported = False
        self.pool: Pool = TaskThreads()
        # Batched launches (`Executor.batch_launch`): a fixed small pool, a task a batch.
        self.batches = ThreadPoolExecutor(LAUNCH_POOL_THREADS, thread_name_prefix="rota-launch")
        self._waiting: dict[int, tuple[Executor, list[tuple[Held, Done]]]] = {}  # not begun
        # The cadence pass's deferred durability waits (rota.application.pass_sync): what
        # a pass appended is made durable before anything here acts on it.
        self.passes = PassSync(service.store)
        # (wall reading, a third of the lease, their sum): the last first-renewal computed.
        self._renewal: tuple[datetime | None, float, datetime] = (None, 0.0, datetime.min)

    def only_launch_writes(self, after: int, head: int) -> bool:
        """Whether the log's events in (after, head] are all this host's launch writes
        (phases, recovery metadata): a commit of those alone gives the cadence nothing to do."""
        return self.service.lifecycle.grouped.only_ours(after, head)

    def durable(self) -> None:
        """Make the current pass's appends durable before acting outside the store."""
        self.passes.durable()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run `fn` on the launcher (a thread of its own), once what the pass appended so
        far is durable (it may act on it: adopt, stop, deliver, forget)."""
        self.durable()
        return self.pool.submit(fn, *args, **kwargs)

    # -- launching ------------------------------------------------------------------------

    def invoked_with_claim(self, pinned: Pinned) -> bool | None:
        """Whether a new attempt pinned so is launched as soon as its claim is durable,
        with nothing in between (no run-environment hook; an executor here serves it), and
        then whether its executor isolates: its invoke marker is appended with the claim
        (`LifecycleCommands.start_pass(invoke=...)`). None: it is not."""
        if self.environment is not None:
            return None
        executor = self.directory.executor_pinned(pinned)
        return None if executor is None else executor.isolates

    def launch_claimed(self, claims: list[Claimed]) -> None:
        """Write invoke markers and launch (or resolve the environment first, off the loop);
        an attempt whose marker its claim's append wrote is launched at once."""
        direct: list[Claimed] = []
        for claimed in claims:
            if self.environment is None:
                direct.append(claimed)
            else:
                with self.held_lock:
                    self.launching.add(claimed.attempt.execution_id)
                self.submit(self._prepare_and_launch, claimed)
        if direct:
            # An isolating executor holds every process until its launch is pinned, so a
            # lost lease before the pin relaunches instead of adopting (rota.domain.recovery).
            executors = [self.directory.executor_for(c.attempt) for c in direct]
            marking = [
                (c.attempt.execution_id, c.attempt.epoch, e is not None and e.isolates)
                for c, e in zip(direct, executors, strict=True)
                if not _invoked(c.attempt)
            ]
            refused: dict[str, Refusal] = {}
            if marking:
                refused = self.service.lifecycle.invoke_many(
                    [(execution_id, epoch) for execution_id, epoch, _ in marking],
                    [isolated for _, _, isolated in marking],
                )
            self.durable()  # the invoke markers are durable before any executor is called
            # One clock reading for the batch: each lease's renewal counts from it.
            now, ticks = self.service.now(), self.ticks()
            # Results reported while the batch launches (an inline executor's, at once)
            # wake the loop once, when the batch is through (`done`).
            self._batching = True
            batches: dict[int, tuple[Executor, list[tuple[Held, Done]]]] = {}
            try:
                for claimed, executor in zip(direct, executors, strict=True):
                    if claimed.attempt.execution_id not in refused:
                        self._launch(claimed, {}, executor, (now, ticks), batches)
                for executor, batch in batches.values():
                    self._queue_batch(executor, batch)
            finally:
                self._batching = False
                if self._reported:
                    self._reported = False
                    self.wake.set()

    def _queue_batch(self, executor: Executor, batch: list[tuple[Held, Done]]) -> None:
        """Hand a batch to the launch pool; while an earlier one of the same executor still
        waits for a thread, join it (under load, batches grow instead of queueing up)."""
        key = id(executor)
        with self.held_lock:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting[1].extend(batch)
                return
            self._waiting[key] = (executor, batch)
        self.batches.submit(self._run_batch, key)

    def _run_batch(self, key: int) -> None:
        with self.held_lock:
            executor, batch = self._waiting.pop(key)
        call_launch_many(executor, batch, self._persist_all, self.unwritable)

    def unwritable(self, held: Held, executor: Executor, error: Exception) -> bool:
        """Whether the launch's `error` was a write the store did not take (`unrecorded`)."""
        return unrecorded(self, held, executor, error)

    def _persist_all(
        self, pairs: Sequence[tuple[LaunchContext, Any]]
    ) -> list[BaseException | None]:
        """Pin a launch batch's recovery metadata in one append (`PersistMany`)."""
        items = [(ctx.execution_id, ctx.epoch, metadata) for ctx, metadata in pairs]
        try:
            answers = self.service.lifecycle.persist_recovery_many(items) if items else []
        except Exception as exc:  # each write failed on its own as well: hand each the error
            return [exc] * len(items)
        for (ctx, _), answer in zip(pairs, answers, strict=True):
            if answer is None:
                ctx.recovery_persisted = True
        return answers

    def _prepare_and_launch(self, claimed: Claimed) -> None:
        try:
            self._prepare(claimed)
        finally:
            with self.held_lock:
                self.launching.discard(claimed.attempt.execution_id)
            self.wake.set()

    def _prepare(self, claimed: Claimed) -> None:
        attempt = claimed.attempt
        execution_id = attempt.execution_id
        lifecycle = self.service.lifecycle
        assert self.environment is not None
        try:
            lifecycle.phase(execution_id, attempt.epoch, "environment", None)
            env = self.environment(claimed.work, attempt)
            lifecycle.phase(execution_id, attempt.epoch, "environment", "ok")
        except Refusal:
            return
        except Exception:
            log.warning("run environment of %s unavailable", execution_id, exc_info=True)
            try:
                lifecycle.phase(execution_id, attempt.epoch, "environment", "failed")
                lifecycle.finish(
                    execution_id,
                    attempt.epoch,
                    Result(
                        outcome="failed",
                        error_code=FailureCode.ENVIRONMENT_UNAVAILABLE,
                        error_message="run environment unavailable",
                    ),
                )
            except Refusal:
                pass
            self.wake.set()
            return
        try:
            lifecycle.invoke(execution_id, attempt.epoch, self._isolates(attempt))
        except Refusal:
            return
        self._launch(claimed, env, self.directory.executor_for(attempt))

    def _isolates(self, attempt: AttemptState) -> bool:
        executor = self.directory.executor_for(attempt)
        return executor is not None and executor.isolates

    def context(
        self, attempt: AttemptState, env: dict[str, str], resume: bool, *, opened: bool = True
    ) -> LaunchContext:
        execution_id, epoch, lifecycle = attempt.execution_id, attempt.epoch, self.service.lifecycle
        # The binding's environment first, then the run-environment hook's values over it
        # (`secrets_for` gives a dict of its own).
        secrets = self.service.secrets_for(attempt)
        env = {**secrets, **env} if env else secrets
        inputs = [p.payload for p in attempt.consumed]
        personal = self.service.personal
        if opened and personal is not None:  # sealed fields opened for the job (`_launch`)
            inputs = personal.open_inputs(attempt.work_id, inputs)
        return LaunchContext(
            work_id=attempt.work_id,
            attempt=attempt.number,
            epoch=epoch,
            inputs=inputs,
            input_positions=[p.position for p in attempt.consumed],
            config=dict(attempt.pinned.binding.config),
            deadline=attempt.deadline,
            env=env,
            resume=resume,
            grants=attempt.grants,
            trace=self.trace_context(execution_id, epoch) if self.trace_context else {},
            persist=lambda metadata: lifecycle.persist_recovery(execution_id, epoch, metadata),
            record_phase=lambda name, outcome: self._record_phase(
                execution_id, epoch, name, outcome
            ),
        )

    def _record_phase(self, execution_id: str, epoch: int, name: str, outcome: str | None) -> None:
        """Record a launch phase; a write refused (lost lease, too many phases) only leaves
        the trail short, it never aborts what the launch is doing (seed 001). A start is
        not waited for: it shares an append with the launch's next write (its end at the
        latest), in order (application/launch_writes.py)."""
        try:
            self.service.lifecycle.phase(execution_id, epoch, name, outcome, outcome is not None)
        except Refusal as refusal:
            log.info("launch phase %s of %s not recorded: %s", name, execution_id, refusal)

    def hold(
        self,
        attempt: AttemptState,
        ctx: LaunchContext,
        executor: Executor,
        *,
        launching: bool = False,
        clocks: tuple[datetime, float] | None = None,
    ) -> Held:
        """Renew this attempt's lease on every pass from now on (until it is dropped);
        `clocks`: the wall and monotonic readings to count from (else read now)."""
        third = self.service.settings.lease_seconds / 3
        now, ticks = clocks if clocks is not None else (self.service.now(), self.ticks())
        execution_id, deadline = attempt.execution_id, attempt.deadline
        # A batch of launches shares its clock readings (`launch_claimed`): each lease's
        # first renewal is due at the same instant, computed once.
        renewal = self._renewal
        if renewal[0] is not now or renewal[1] != third:
            renewal = self._renewal = (now, third, now + timedelta(seconds=third))
        with self.held_lock:
            # An attempt this process already runs keeps its run-time budget (a recovery
            # that adopts it here is not a new run); any other starts from its deadline.
            budget_end = self.running.get(execution_id)
            if budget_end is None:
                budget_end = ticks + max(0.0, (deadline - now).total_seconds())
            held = Held(
                execution_id,
                attempt.epoch,
                ctx,
                executor,
                renewal[2],
                deadline,
                launching,
                renew_due=ticks + third,
                budget_end=budget_end,
            )
            self.held[execution_id] = held
            self.running[execution_id] = budget_end
        return held

    def remaining(self, execution_id: str) -> float | None:
        """Seconds of run time left of an attempt this process runs; None if it does not."""
        with self.held_lock:
            budget_end = self.running.get(execution_id)
        return None if budget_end is None else budget_end - self.ticks()

    def settled(self, execution_id: str) -> None:
        """The attempt's outcome is recorded, or it ended: this process no longer runs it."""
        with self.held_lock:
            self.running.pop(execution_id, None)

    def drop(self, held: Held, reason: BaseException | None, cancel: bool = True) -> None:
        """Stop holding the attempt's lease; cancel its launch (with `reason`) unless told not."""
        with self.held_lock:
            if self.held.get(held.execution_id) is held:
                del self.held[held.execution_id]
        if reason is not None:
            held.ctx.cancel_reason = reason
        if cancel:
            held.ctx.cancel.set()

    def done(self, held: Held) -> Callable[[Result], None]:
        """The callback an executor reports the attempt's result through (any thread)."""

        def done(result: Result) -> None:
            held.reported = True
            self.results.put((held.execution_id, held.epoch, result))
            if self._batching:
                # `launch_claimed` sets `wake` once its batch is through; if it just
                # finished (and saw no report), this one sets it after all.
                self._reported = True
                if self._batching:
                    return
            self.wake.set()

        return done

    def _launch(
        self,
        claimed: Claimed,
        env: dict[str, str],
        executor: Executor | None,
        clocks: tuple[datetime, float] | None = None,
        batches: dict[int, tuple[Executor, list[tuple[Held, Done]]]] | None = None,
    ) -> None:
        """Launch a claimed attempt (its invoke marker durable) on `executor`, the one
        `ExecutorDirectory.executor_for` gives it (None: this process has none); with
        `batches`, an executor that declares `batch_launch` gets it in its batch there."""
        attempt = claimed.attempt
        try:
            ctx = self.context(attempt, env, claimed.resume)
        except Unreadable as unreadable:  # forgotten or changed: nothing runs, for good
            self.results.put((attempt.execution_id, attempt.epoch, unreadable.result()))
            return
        if executor is None:
            failure = Result(
                outcome="failed",
                error_code=FailureCode.UNSUPPORTED_GENERATION,
                error_message=f"no executor {attempt.pinned.registration.name!r} for "
                f"configuration generation {attempt.pinned.generation} in this process",
            )
            self.results.put((attempt.execution_id, attempt.epoch, failure))
            return
        held = self.hold(attempt, ctx, executor, launching=True, clocks=clocks)
        if batches is not None and getattr(executor, "batch_launch", False):
            batches.setdefault(id(executor), (executor, []))[1].append((held, self.done(held)))
        elif getattr(executor, "inline", False):
            call_launch(executor, held, self.done(held), self.unwritable)
        else:
            self.submit(call_launch, executor, held, self.done(held), self.unwritable)

    # -- stopping -------------------------------------------------------------------------

    def release_all(self, *, leave_running: bool = True) -> None:
        """Release every held lease (a graceful stop): the attempts become recoverable.

        With `leave_running`, the work of an executor that can be adopted (it declares
        `recover`: a detached process) is left running for the next host to adopt rather
        than cancelled (seed 001: release makes the same attempt recoverable); any other
        launch is cancelled, since it cannot outlive this process anyway."""
        with self.held_lock:
            held = list(self.held.values())
            self.held.clear()
            self.running.clear()  # from now on the next host recovers them
        for item in held:
            with contextlib.suppress(Refusal):
                self.service.lifecycle.release(item.execution_id, item.epoch, "host_stopped")
            if leave_running and "recover" in item.executor.capabilities:
                continue
            item.ctx.cancel_reason = LeaseLost("the host stopped and released the lease")
            item.ctx.cancel.set()


def _invoked(attempt: AttemptState) -> bool:
    """Its open segment's invoke marker is written (by the claim's append)."""
    segment = attempt.open_segment
    return segment is not None and segment.invoke == "called"
