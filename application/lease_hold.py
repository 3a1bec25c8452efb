"""`LeaseHold`: keep an attempt's lease while something else launches or observes it.

A host that claims on its pass and launches elsewhere holds the lease from the claim with a
`LeaseHold`: it renews every third of the lease duration until stopped or until a renewal
is refused. When the lease is lost, `cancel` (a `threading.Event`) is set and `reason` is
the `LeaseLost` refusal, so a launch watching `cancel` stops at once rather than at its
next fenced write. asyncio code can wait for it with
`await loop.run_in_executor(None, hold.cancel.wait)`.
"""

from __future__ import annotations

import threading

from rota.application.service import SchedulerService
from rota.domain.errors import LeaseLost, Refusal


class LeaseHold:
    """Renews one attempt's lease on a background thread until stopped or refused."""

    def __init__(
        self,
        service: SchedulerService,
        execution_id: str,
        epoch: int,
        *,
        cancel: threading.Event | None = None,
        interval: float | None = None,
    ) -> None:
        self.service = service
        self.execution_id = execution_id
        self.epoch = epoch
        self.cancel = cancel or threading.Event()
        self.reason: LeaseLost | None = None
        self.renewals = 0
        self.interval = interval if interval is not None else service.settings.lease_seconds / 3
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"rota-hold-{execution_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.service.lifecycle.renew(self.execution_id, self.epoch)
                self.renewals += 1
            except LeaseLost as lost:
                self._lose(lost)
                return
            except Refusal as refusal:
                self._lose(LeaseLost(f"{self.execution_id}: renewal refused: {refusal}"))
                return

    def _lose(self, reason: LeaseLost) -> None:
        self.reason = reason
        self.cancel.set()

    @property
    def lost(self) -> bool:
        return self.reason is not None

    def stop(self) -> None:
        """Stop renewing (the lease then lapses unless the outcome was stored)."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> LeaseHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
