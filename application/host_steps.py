"""The host's recovery, stop verification, control dispatch and start-gate steps.

A mixin of `rota.application.host.Host`, which owns the state these steps use (the
service, executors, held leases, the launcher pool); split out so each module does one job.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rota.application.errors import ExecutorError
from rota.application.ports import Executor
from rota.application.service import Claimed, Dispatch, GateDecision
from rota.domain.errors import Refusal
from rota.domain.state import AttemptState

if TYPE_CHECKING:
    from rota.application.host import Host as _Host
    from rota.application.host import TickReport

    _Base = _Host
else:
    _Base = object

log = logging.getLogger("rota.host")


class HostOperations(_Base):
    # -- start gates ---------------------------------------------------------------------

    def _ask_gates(self, work_id: str) -> GateDecision:
        """Ask every registered gate in name order; the first hold or error decides."""
        work = self.service.projection.works.get(work_id)
        if work is None:
            return GateDecision("error", "", "the Work disappeared")
        binding = self.service.bindings.get(work.binding)
        first_input = work.pending[0].payload if work.pending else None
        for name in sorted(self.gates):
            try:
                verdict = self.gates[name](work, binding, first_input)
            except Exception:
                log.warning("start gate %s failed on %s", name, work_id, exc_info=True)
                return GateDecision("error", name, "")
            if verdict is not None and verdict is not True:
                reason = getattr(verdict, "reason", None) or str(verdict)
                return GateDecision("hold", name, reason[:500])
        return GateDecision("let")

    # -- recovery ------------------------------------------------------------------------

    def executor_for(self, attempt: AttemptState) -> Executor | None:
        """The executor of the attempt's pinned generation; None when this host has none.

        A stable executor serves every generation; any other serves its own generation,
        or an older one only when registered as that generation's historical executor.
        A missing generation is never given to a replacement.
        """
        name = attempt.pinned.registration.name
        historical = self.historical.get((attempt.pinned.generation, name))
        if historical is not None:
            return historical
        executor = self.executors.get(name)
        if executor is None:
            return None
        if executor.stable or attempt.pinned.generation == self.service.generation:
            return executor
        return None

    def _recover(self, report: TickReport) -> None:
        result = self.service.recovery.recovery_pass(
            self.recovery_page, supported=lambda attempt: self.executor_for(attempt) is not None
        )
        report.held.extend(result.held)
        for execution_id in result.unsupported:
            report.errors.append(
                f"unsupported_generation: {execution_id}: this host has no executor for the "
                "attempt's pinned configuration generation; it is left for a host that has"
            )
        relaunch: list[Claimed] = []
        for item in result.recovered:
            report.recovered += 1
            executor = self.executor_for(item.attempt)
            assert executor is not None
            if item.timed_out:
                self._request_stop(item.attempt.execution_id, item.attempt.epoch, executor)
            elif item.mode == "relaunch":
                report.relaunched += 1
                relaunch.append(Claimed(item.work, item.attempt, False))
            else:
                # Evidence about the process comes from whoever started it, not from
                # whoever recovered the attempt last (a recovery that found nothing).
                self._adopt(item.attempt, executor, item.attempt.launch_owner)
        if relaunch:
            self._launch_claimed(relaunch)
        if result.has_more:
            self.wake.set()

    def _adopt(self, attempt: AttemptState, executor: Executor, previous_owner: str) -> None:
        ctx = self._context(attempt, {}, resume=False)
        ctx.previous_owner = previous_owner
        execution_id, epoch = attempt.execution_id, attempt.epoch
        held = self._hold(attempt, ctx, executor)

        def adopt() -> None:
            try:
                outcome = executor.recover(ctx, attempt.recovery_metadata, self._done(held))
            except Exception:
                log.warning("recovery of %s failed", execution_id, exc_info=True)
                outcome = "unknown"
            if outcome == "attached":
                try:
                    self.service.recovery.adopted(execution_id, epoch)
                except Refusal as refusal:
                    log.info("adoption of %s not recorded: %s", execution_id, refusal)
                return
            self._drop(held, reason=None, cancel=False)
            if outcome == "not_started":
                try:
                    again = self.service.recovery.relaunch_unstarted(execution_id, epoch)
                except Refusal as refusal:
                    log.info("relaunching %s refused: %s", execution_id, refusal)
                else:
                    if again is not None:
                        self._launch_claimed([Claimed(again.work, again.attempt, False)])
                self.wake.set()
                return
            if outcome == "stopped":
                try:
                    self.service.recovery.lose(execution_id, epoch, "not_running")
                except Refusal as refusal:
                    log.info("losing %s refused: %s", execution_id, refusal)
            else:
                log.info("recovery of %s has no evidence; retrying on a later pass", execution_id)
            self.wake.set()

        self._launcher.submit(adopt)

    def _request_stop(self, execution_id: str, epoch: int, executor: Executor) -> None:
        """Ask for verified stop evidence now rather than on a later pass."""
        self._stop_next.pop(execution_id, None)

    def _confirm_stops(self, report: TickReport) -> None:
        """Ask for stop evidence of every ended attempt still holding its slot.

        Timed out, interrupted and cancelled attempts keep their resource hold until the
        executor verifies nothing of them runs; the check runs off the loop (a stop may
        wait for a process to exit) and at most every few seconds per attempt.
        """
        projection = self.service.projection
        now = time.monotonic()
        for holders in list(projection.slots.values()):
            for execution_id in list(holders):
                found = projection.attempt(execution_id)
                if found is None:
                    continue
                _, attempt = found
                if attempt.status != "ended" or attempt.stop_confirmed:
                    continue
                if execution_id in self.stopping or self._stop_next.get(execution_id, 0) > now:
                    continue
                executor = self.executor_for(attempt)
                if executor is None:
                    continue
                self._stop_next[execution_id] = now + min(5.0, self.service.settings.lease_seconds)
                self.stopping[execution_id] = (attempt.epoch, executor, attempt.recovery_metadata)
                self._launcher.submit(
                    self._stop, execution_id, attempt.epoch, executor, attempt.recovery_metadata
                )

    def _stop(self, execution_id: str, epoch: int, executor: Executor, metadata: Any) -> None:
        try:
            evidence = executor.stop(execution_id, epoch, metadata)
            if evidence == "stopped":
                self.service.lifecycle.confirm_stopped(execution_id, epoch)
                self._stop_next.pop(execution_id, None)
        except Refusal as refusal:
            log.info("confirming the stop of %s refused: %s", execution_id, refusal)
        except Exception:
            log.warning("stopping %s failed", execution_id, exc_info=True)
        finally:
            self.stopping.pop(execution_id, None)
            self.wake.set()

    # -- control dispatch ------------------------------------------------------------------

    def _dispatch(self, report: TickReport) -> None:
        """Send every dispatchable control through its attempt's pinned executor."""
        for claim in self.service.control.dispatch_pass():
            executor = self.executor_for(claim.attempt)
            if executor is None:
                continue
            report.dispatched += 1
            self._launcher.submit(self._deliver, claim, executor)

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
        self.wake.set()
