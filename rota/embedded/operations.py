"""The operator commands of the embedded API: `Scheduler.accept`, `retry`, `release`,
`settle_gate`, `cancel`, `inject`, `interrupt`, the start gates, lease holds and stop
confirmation; each one command of the application service, then a wake of the cadence.

`Scheduler` (`rota.scheduler`) is these commands, the reads (`rota.embedded.reads`) and the
submit, register and cadence half.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import msgspec

from rota.application.commands.requests import Receipt, receipt
from rota.application.commands.submissions import unsealed_personal
from rota.application.commands.waits import InjectAnswer
from rota.application.errors import PortCode
from rota.application.host import Host
from rota.application.lease_hold import LeaseHold
from rota.application.ports import Gate, WaitCheck
from rota.application.service import SchedulerService
from rota.domain.errors import RotaError
from rota.domain.personal import check_paths
from rota.domain.submission import WorkInput
from rota.embedded.reads import SchedulerReads


class SchedulerOperations(SchedulerReads):
    """The operator commands of a `Scheduler` (see the module docstring)."""

    service: SchedulerService
    host: Host

    def accept(
        self,
        work_id: str,
        payload: Any = None,
        *,
        key: str | None = None,
        correlation_key: str | None = None,
        personal: Sequence[str] = (),
    ) -> int:
        """Accept an input for a Work; returns its acceptance sequence (log position).
        `personal` (and the Work's binding's `personal`) mark fields sealed as at submit."""
        sealing = self.service.personal
        if sealing is not None:
            given = WorkInput(payload, key, correlation_key, check_paths(personal))
            sealed = sealing.seal_accept(work_id, given)
            payload, key = sealed.payload, sealed.key
        elif personal:
            raise unsealed_personal(work_id, tuple(personal))
        recorded = self.service.lifecycle.accept(
            work_id, payload, key=key, correlation_key=correlation_key
        )
        self.host.wake.set()
        return recorded.position

    def forget(self, work_id: str, *, by: str = "operator", reason: str = "") -> int:
        """Forget the Work's personal data: destroy the key its personal input fields were
        sealed under and record `core.work.forgotten` (who, why; never what). Idempotent:
        forgetting again returns the first record's position. An attempt launched later
        fails `input_forgotten`; the log, its chain and its proofs stay as they were."""
        sealing = self.service.personal
        if sealing is None:
            raise RotaError(
                "this scheduler keeps no personal data keys", code=PortCode.PERSONAL_UNAVAILABLE
            )
        recorded = sealing.forget(work_id, by=by, reason=reason)
        return recorded.position

    def retry(
        self,
        work_id: str,
        *,
        reason: str = "",
        requested_by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """Manually retry a failed Work (`core.manual.retry`): resets its failure budget.

        `request_id` (every operator command takes one) names the request: the answering
        event is recorded under `request/<id>`, and a repeat of the same request, in this
        process or after a restart, appends nothing and returns the first receipt
        (`repeated` True); the id used for another request is `request_id_reused`."""
        result = self.service.lifecycle.request_retry(
            work_id, requested_by=requested_by, reason=reason, request_id=request_id
        )
        self.host.wake.set()
        return receipt(result, request_id)

    def release(
        self,
        work_id: str,
        *,
        kind: str | None = None,
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """Release an operator-releasable hold (crash_loop, recovery_exhausted, budget,
        operator, wait) of a Work.

        A start gate's hold is settled only by its gate (`gate_hold`). `request_id`: as
        `retry`.
        """
        result = self.service.recovery.release_hold(work_id, kind, by, request_id)
        self.host.wake.set()
        return receipt(result, request_id)

    def adoptable(self, execution_id: str, epoch: int) -> bool:
        """Whether an attempt whose lease this host lost still belongs to recovery."""
        return self.service.recovery.adoptable(execution_id, epoch)

    def register_gate(self, name: str, gate: Gate) -> None:
        """Register a start gate, asked (in name order, outside any write) before a Work's
        first attempt, once capacity allows it.

        `gate(work, binding, first_input)` gets the Work (`WorkState`), the `Binding` its
        attempt would run on and the input that would be its first (`rota.PendingInput`:
        `position`, `key`, `payload`, `correlation_key`; with `trigger="last"` the newest
        pending input, which triggers it). It returns None (or True) to let the start go
        on, or a hold: `rota.StartHold(reason)` (or a string, or any object with a
        `reason`); the Work is then held (`core.gate.held`) until `settle_gate` by this
        same name, and the gates after it are not asked. Raising fails closed: the start is
        refused (`start_gate`) and nothing is held, so the next pass asks again.
        """
        self.host.register_gate(name, gate)

    def settle_gate(
        self,
        work_id: str,
        registration: str,
        *,
        admit: bool,
        reason: str = "",
        request_id: str | None = None,
    ) -> Receipt:
        """Settle a gate hold: admit (one pass that skips the gates) or refuse (cancel).
        `request_id`: as `retry`."""
        result = self.service.admission.settle_gate(
            work_id, registration, admit=admit, reason=reason, request_id=request_id
        )
        self.host.wake.set()
        return receipt(result, request_id)

    def cancel(
        self,
        work_id: str,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """Cancel a Work: its attempt, waits, timers and input are fenced at once; a running
        process is stopped after the commit and keeps its slot until the stop is verified.
        `request_id`: as `retry` (a repeat is not `work_terminal`: it gets its receipt)."""
        result = self.service.admission.cancel(work_id, reason=reason, by=by, request_id=request_id)
        self.host.wake.set()
        return receipt(result, request_id)

    def inject(
        self,
        work_id: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str = "operator",
        request_id: str | None = None,
    ) -> InjectAnswer:
        """Give the running attempt an input now (a durable intent, dispatched by the
        cadence through the attempt's pinned executor, which must have declared `inject`:
        in-process callables, sync and async, take it on `ctx.injected`; the shell executor
        does not, so its running attempts refuse it with `unsupported_control`).
        Acknowledged means accepted, not consumed: the input stays pending until an
        attempt's result consumes it.

        For a parked attempt (a waiting outcome) the input goes to its wait instead, with
        any executor: the answer's `delivery` is `wake` when its wait predicate matches
        (the attempt resumes at the next pass, this input its wake) or `queued`, with why.

        `request_id` is the input's key (`key`, if given, must be the same): a repeat
        answers for the input it accepted, even once the attempt has ended, with the
        answer's `request` receipt `repeated`."""
        result = self.service.control.inject(
            work_id, payload, key=key, by=by, request_id=request_id
        )
        answer = self.service.waits.answer(work_id, result)
        self.host.wake.set()
        if request_id is None:
            return answer
        return msgspec.structs.replace(answer, request=receipt(result, request_id))

    def register_wait_predicate(self, name: str, check: WaitCheck) -> None:
        """Register a named wait predicate: a waiting result's `rota.NamedWait(name)`.

        `check(input) -> bool` gets a pending input (`rota.PendingInput`: `position`,
        `key`, `payload`, `correlation_key`) and returns True when it should resume the
        parked attempt. It is asked once per input per park, outside any write, and its
        verdict is recorded (`core.execution.wait_judged`): keep it quick and decided by
        the input alone. Raising, or a park naming a predicate not registered here (after
        a restart without it), holds the Work (kind `wait`) until `release`.
        """
        self.service.waits.register(name, check)
        self.host.wake.set()

    def interrupt(
        self, work_id: str, *, by: str = "operator", request_id: str | None = None
    ) -> Receipt:
        """Fence the running attempt (the Work is ready again at once), then interrupt it;
        its slot is held until its stop is verified. `request_id`: as `retry`."""
        result = self.service.control.interrupt(work_id, by=by, request_id=request_id)
        self.host.wake.set()
        return receipt(result, request_id)

    def hold(
        self, execution_id: str, epoch: int, *, cancel: threading.Event | None = None
    ) -> LeaseHold:
        """Renew an attempt's lease every third of its duration until stopped or refused.

        On a lost lease, `hold.cancel` is set and `hold.reason` is the `LeaseLost`.
        """
        return LeaseHold(self.service, execution_id, epoch, cancel=cancel)

    def confirm_stopped(
        self, execution_id: str, expected_epoch: int, *, by: str | None = None
    ) -> None:
        """Record verified stop evidence for an ended attempt, freeing its slot. `by`: a
        person vouches that its processes are gone (recorded as evidence `operator: BY`),
        where no executor could verify the stop (its host is gone for good)."""
        evidence = "verified" if by is None else f"operator: {by}"
        self.service.lifecycle.confirm_stopped(execution_id, expected_epoch, evidence)
        self.host.wake.set()
