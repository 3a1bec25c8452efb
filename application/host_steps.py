"""The host's steps besides launching: start gates, recovery, stop verification, control
(and `first_of_each`, which orders the results a pass observes).

Each is a collaborator of `rota.application.host.Host`, built over the service, the
host's executors (`ExecutorDirectory`) and its launches (`Launches`); the host calls them
in the cadence's fixed order. Whatever can block (an executor's `recover`, `stop`,
`interrupt` or `inject`) runs on the launcher pool, never on the loop.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from rota.application.commands.lifecycle import Claimed
from rota.application.errors import ExecutorError, StoreError
from rota.application.executor_directory import ExecutorDirectory
from rota.application.launches import Launches
from rota.application.ports import Executor, Gate
from rota.application.service import Dispatch, GateDecision, SchedulerService
from rota.domain.errors import Refusal
from rota.domain.lifecycle import select_inputs
from rota.domain.results import Result
from rota.domain.state import AttemptState

log = logging.getLogger("rota.host")


class Report(Protocol):
    """What the steps count into (the host's `TickReport`)."""

    recovered: int
    relaunched: int
    dispatched: int
    held: list[str]
    errors: list[str]


class StartGates:
    """The start gates a host asks before a Work's first attempt, in name order."""

    def __init__(self, service: SchedulerService) -> None:
        self.service = service
        self.gates: dict[str, Gate] = {}

    def ask(self, work_id: str) -> GateDecision:
        """Ask every registered gate in name order about the Work, the binding it would run
        on and the input that would trigger its attempt; the first hold or error decides."""
        work = self.service.projection.works.get(work_id)
        if work is None:
            return GateDecision("error", "", "the Work disappeared")
        binding = self.service.bindings.get(work.binding)
        if binding is None or not work.pending:
            return GateDecision("error", "", "the Work has no binding or input to start on")
        _, trigger = select_inputs(work)
        for name in sorted(self.gates):
            try:
                verdict = self.gates[name](work, binding, trigger)
            except Exception:
                log.warning("start gate %s failed on %s", name, work_id, exc_info=True)
                return GateDecision("error", name, "", trigger.position)
            if verdict is not None and verdict is not True:
                reason = getattr(verdict, "reason", None) or str(verdict)
                return GateDecision("hold", name, str(reason)[:500], trigger.position)
        return GateDecision("let", trigger=trigger.position)


class StopVerification:
    """Stop evidence for ended attempts still holding their capacity slot.

    Timed out, interrupted and cancelled attempts keep their resource hold until the
    executor verifies nothing of them runs; the check runs off the loop (a stop may wait
    for a process to exit) and at most every few seconds per attempt.
    """

    def __init__(
        self, service: SchedulerService, directory: ExecutorDirectory, launches: Launches
    ) -> None:
        self.service = service
        self.directory = directory
        self.launches = launches
        self.stopping: dict[str, tuple[int, Executor, object]] = {}
        self._next: dict[str, float] = {}

    def request(self, execution_id: str) -> None:
        """Ask for verified stop evidence now rather than on a later pass."""
        self._next.pop(execution_id, None)

    def run(self, report: Report) -> None:
        projection = self.service.projection
        now = self.launches.ticks()  # the host's clock (injected), not the machine's
        for holders in list(projection.slots.values()):
            for execution_id in sorted(holders):  # in id order: the same order every run
                found = projection.attempt(execution_id)
                if found is None:
                    continue
                _, attempt = found
                if attempt.status != "ended" or attempt.stop_confirmed:
                    continue
                if execution_id in self.stopping or self._next.get(execution_id, 0) > now:
                    continue
                executor = self.directory.executor_for(attempt)
                if executor is None:
                    # Its slot stays held (no evidence), and says so on every pass.
                    report.errors.append(self.directory.unsupported(attempt))
                    continue
                self._next[execution_id] = now + min(5.0, self.service.settings.lease_seconds)
                self.stopping[execution_id] = (attempt.epoch, executor, attempt.recovery_metadata)
                self.launches.submit(
                    self._stop, execution_id, attempt.epoch, executor, attempt.recovery_metadata
                )

    def _stop(self, execution_id: str, epoch: int, executor: Executor, metadata: Any) -> None:
        try:
            evidence = executor.stop(execution_id, epoch, metadata)
            if evidence == "stopped":
                self.service.lifecycle.confirm_stopped(execution_id, epoch)
                self._next.pop(execution_id, None)
        except Refusal as refusal:
            log.info("confirming the stop of %s refused: %s", execution_id, refusal)
        except Exception:
            log.warning("stopping %s failed", execution_id, exc_info=True)
        finally:
            self.stopping.pop(execution_id, None)
            self.launches.wake.set()


class RuntimeRecovery:
    """Recovery of attempts whose lease expired: relaunch, adopt or stop them (seed 002)."""

    def __init__(
        self,
        service: SchedulerService,
        directory: ExecutorDirectory,
        launches: Launches,
        stops: StopVerification,
        *,
        page: int = 16,
    ) -> None:
        self.service = service
        self.directory = directory
        self.launches = launches
        self.stops = stops
        self.page = page

    def run(self, report: Report) -> None:
        directory, launches = self.directory, self.launches
        result = self.service.recovery.recovery_pass(
            self.page,
            supported=lambda attempt: directory.executor_for(attempt) is not None,
            # An attempt this process runs is measured by its own monotonic clock.
            remaining=lambda attempt: launches.remaining(attempt.execution_id),
        )
        report.held.extend(result.held)
        for attempt in result.unsupported:
            report.errors.append(directory.unsupported(attempt) + "; left for a host that has")
        relaunch: list[Claimed] = []
        for item in result.recovered:
            report.recovered += 1
            executor = directory.executor_for(item.attempt)
            assert executor is not None
            if item.timed_out:
                self.stops.request(item.attempt.execution_id)
            elif item.mode == "relaunch":
                report.relaunched += 1
                relaunch.append(Claimed(item.work, item.attempt, False))
            else:
                # Evidence about the process comes from whoever started it, not from
                # whoever recovered the attempt last (a recovery that found nothing).
                self._adopt(item.attempt, executor, item.attempt.launch_owner)
        if relaunch:
            self.launches.launch_claimed(relaunch)
        if result.has_more:
            self.launches.wake.set()

    def _adopt(self, attempt: AttemptState, executor: Executor, previous_owner: str) -> None:
        launches = self.launches
        # (its process has its input: personal fields are not opened again to adopt it)
        ctx = launches.context(attempt, {}, resume=False, opened=False)
        ctx.previous_owner = previous_owner
        execution_id, epoch = attempt.execution_id, attempt.epoch
        held = launches.hold(attempt, ctx, executor)
        recovery = self.service.recovery
        report = _AfterAdoption(launches.done(held))

        def adopt() -> None:
            evidence = "unknown"
            try:
                outcome = executor.recover(ctx, attempt.recovery_metadata, report)
            except Exception:
                log.warning("recovery of %s failed", execution_id, exc_info=True)
                outcome, evidence = "unknown", "error"
            if outcome == "attached":
                try:
                    recovery.adopted(execution_id, epoch)
                except Refusal as refusal:
                    log.info("adoption of %s not recorded: %s", execution_id, refusal)
                finally:
                    report.open()
                return
            # Still held here, or released meanwhile (a graceful stop hands it on).
            with launches.held_lock:
                ours = launches.held.get(execution_id) is held
            launches.drop(held, reason=None, cancel=False)
            if outcome == "not_started":
                try:
                    again = recovery.relaunch_unstarted(execution_id, epoch)
                except Refusal as refusal:
                    log.info("relaunching %s refused: %s", execution_id, refusal)
                else:
                    if again is not None:
                        launches.launch_claimed([Claimed(again.work, again.attempt, False)])
                launches.wake.set()
                return
            if outcome == "stopped":
                try:
                    recovery.lose(execution_id, epoch, "not_running")
                except Refusal as refusal:
                    log.info("losing %s refused: %s", execution_id, refusal)
            elif ours:
                self._failed(execution_id, epoch, evidence)
            launches.wake.set()

        launches.submit(adopt)

    def _failed(self, execution_id: str, epoch: int, evidence: str) -> None:
        """No evidence of the attempt: record the failed recovery rather than recover it
        again next lease; the stop verification then stops it through its executor and
        confirms the stop (seed 001: stop/confirm after a failed recovery)."""
        try:
            self.service.recovery.recovery_failed(execution_id, epoch, evidence)
        except Refusal as refusal:
            log.info("the failed recovery of %s not recorded: %s", execution_id, refusal)
            return
        log.warning("recovery of %s found no evidence (%s): stopping it", execution_id, evidence)
        self.launches.settled(execution_id)
        self.stops.request(execution_id)


class _AfterAdoption:
    """The `done` an adopting executor reports through, holding back a result it reports
    at once (one it kept: the run ended while the lease had lapsed) until the adoption is
    recorded, so the log reads recovered, adopted, then the outcome."""

    def __init__(self, done: Callable[[Result], None]) -> None:
        self._done = done
        self._lock = threading.Lock()
        self._held: list[Result] | None = []

    def __call__(self, result: Result) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(result)
                return
        self._done(result)

    def open(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
        for result in held:
            self._done(result)


class ControlDispatch:
    """Sends every dispatchable control through its attempt's pinned executor."""

    def __init__(
        self, service: SchedulerService, directory: ExecutorDirectory, launches: Launches
    ) -> None:
        self.service = service
        self.directory = directory
        self.launches = launches

    def run(self, report: Report) -> None:
        directory = self.directory
        result = self.service.control.dispatch_pass(
            supported=lambda attempt: directory.executor_for(attempt) is not None
        )
        for attempt in result.unsupported:  # not claimed: left undispatched, and said
            report.errors.append(directory.unsupported(attempt))
        for claim in result.dispatched:
            executor = directory.executor_for(claim.attempt)
            assert executor is not None
            report.dispatched += 1
            self.launches.submit(self._deliver, claim, executor)

    def _deliver(self, claim: Dispatch, executor: Executor) -> None:
        attempt, control = claim.attempt, claim.control
        outcome = "ambiguous"
        try:
            if control.kind == "interrupt":
                delivered = executor.interrupt(attempt.execution_id, claim.epoch)
                outcome = "ack" if delivered else "superseded"
            else:
                payload = claim.payload
                answer = executor.inject(
                    attempt.execution_id, claim.epoch, control.input_position or 0, payload
                )
                outcome = "ack" if answer == "accepted" else "not_accepting"
        except ExecutorError:
            outcome = "failed"  # a definite error: the pinned fallback applies
        except Exception:
            log.warning("control %s: delivery unknown", control.intent, exc_info=True)
            outcome = "ambiguous"  # the same intent is dispatched again later
        try:
            self.service.control.answer_control(claim.work_id, control.intent, claim.token, outcome)
        except Refusal as refusal:
            log.info("answer to %s refused: %s", control.intent, refusal)
        self.launches.wake.set()


def first_of_each(
    batch: list[tuple[str, int, Result]],
) -> tuple[list[tuple[str, int, Result]], list[tuple[str, int, Result]]]:
    """The first result of each attempt in `batch`, and the later ones of the same attempts.

    One append fences every item against one snapshot, so two results of one attempt in
    it would both pass the fence, the second for an attempt the first ended (a launch that
    finished inside `launch()` and then got an unacknowledged failure ended a completed
    Work failed; found by the simulator, issue 29). The host decides the later ones on
    its next pass, against what the first recorded."""
    seen: set[str] = set()
    first: list[tuple[str, int, Result]] = []
    later: list[tuple[str, int, Result]] = []
    for item in batch:
        (later if item[0] in seen else first).append(item)
        seen.add(item[0])
    return first, later


def finish_or_keep(
    service: SchedulerService,
    results: queue.SimpleQueue[tuple[str, int, Result]],
    batch: list[tuple[str, int, Result]],
) -> dict[str, Refusal]:
    """Record the outcomes of `batch` (`finish_many`); when the store fails the append (it
    takes no writes: a failover), put the batch back at the head of `results` and raise,
    so the next pass records them: an outcome is never dropped with a failed pass (its
    attempt would stay held and renewed, its result gone)."""
    try:
        return service.lifecycle.finish_many(batch)
    except StoreError:  # (another error is not the store's: kept, it would fail every pass)
        rest = []
        with contextlib.suppress(queue.Empty):
            while True:
                rest.append(results.get_nowait())
        for item in (*batch, *rest):
            results.put(item)
        raise
