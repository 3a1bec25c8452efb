"""The operator commands of the embedded API: `Scheduler.accept`, `retry`, `release`,
`settle_gate`, `cancel`, `inject`, `interrupt`, the start gates, lease holds and stop
confirmation; each one command of the application service, then a wake of the cadence.

`Scheduler` (`rota.scheduler`) is these commands, the reads (`rota.embedded.reads`) and the
submit, register and cadence half.
"""

from __future__ import annotations

import threading
from typing import Any

from rota.application.host import Host
from rota.application.lease_hold import LeaseHold
from rota.application.ports import Gate
from rota.application.service import SchedulerService
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
    ) -> int:
        """Accept an input for a Work; returns its acceptance sequence (log position)."""
        recorded = self.service.lifecycle.accept(
            work_id, payload, key=key, correlation_key=correlation_key
        )
        self.host.wake.set()
        return recorded.position

    def retry(self, work_id: str, *, reason: str = "", requested_by: str = "operator") -> None:
        """Manually retry a failed Work (`core.manual.retry`): resets its failure budget."""
        self.service.lifecycle.request_retry(work_id, requested_by=requested_by, reason=reason)
        self.host.wake.set()

    def release(self, work_id: str, *, kind: str | None = None, by: str = "operator") -> None:
        """Release an operator-releasable hold (crash_loop, recovery_exhausted, budget, operator)
        of a Work.

        A start gate's hold is settled only by its gate (`gate_hold`).
        """
        self.service.recovery.release_hold(work_id, kind, by)
        self.host.wake.set()

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
        self, work_id: str, registration: str, *, admit: bool, reason: str = ""
    ) -> None:
        """Settle a gate hold: admit (one pass that skips the gates) or refuse (cancel)."""
        self.service.admission.settle_gate(work_id, registration, admit=admit, reason=reason)
        self.host.wake.set()

    def cancel(self, work_id: str, *, reason: str = "", by: str = "operator") -> None:
        """Cancel a Work: its attempt, waits, timers and input are fenced at once; a running
        process is stopped after the commit and keeps its slot until the stop is verified."""
        self.service.admission.cancel(work_id, reason=reason, by=by)
        self.host.wake.set()

    def inject(
        self, work_id: str, payload: Any, *, key: str | None = None, by: str = "operator"
    ) -> None:
        """Give the running attempt an input now (a durable intent, dispatched by the
        cadence through the attempt's pinned executor). Acknowledged means accepted, not
        consumed: the input stays pending until an attempt's result consumes it."""
        self.service.control.inject(work_id, payload, key=key, by=by)
        self.host.wake.set()

    def interrupt(self, work_id: str, *, by: str = "operator") -> None:
        """Fence the running attempt (the Work is ready again at once), then interrupt it;
        its slot is held until its stop is verified."""
        self.service.control.interrupt(work_id, by=by)
        self.host.wake.set()

    def hold(
        self, execution_id: str, epoch: int, *, cancel: threading.Event | None = None
    ) -> LeaseHold:
        """Renew an attempt's lease every third of its duration until stopped or refused.

        On a lost lease, `hold.cancel` is set and `hold.reason` is the `LeaseLost`.
        """
        return LeaseHold(self.service, execution_id, epoch, cancel=cancel)

    def confirm_stopped(self, execution_id: str, expected_epoch: int) -> None:
        """Record verified stop evidence for an ended attempt, freeing its slot."""
        self.service.lifecycle.confirm_stopped(execution_id, expected_epoch)
