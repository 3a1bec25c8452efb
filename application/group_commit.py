"""Group commit of concurrent submits: callers on many threads share one store transaction.

Leader/follower, as databases group their commits: a caller queues its request; if no
other caller is committing, it becomes the leader, waits a short window (`window`
seconds, 2 ms by default) only while fewer requests are queued than callers are known
to be arriving (`arrive()`), then appends up to `max_batch` queued requests in ONE
transaction (`LifecycleCommands.submit_batch`) and hands every follower its own result,
or its own refusal: one bad submit does not fail the others. When the batch's append
fails as a whole (a store error, a payload over the store's limit), each request of it is
tried again on its own, so each caller gets its own error. A single caller never waits
(nothing else is arriving): one thread's submit costs what it did without grouping.

Two requests for the same Work never share a batch (the second is decided after the
first is applied). Idempotency is the log's: each input's delivery identity makes a
retried submit a no-op, in a batch or alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from rota.application.lifecycle import SubmitRequest
from rota.application.ports import AppendResult
from rota.domain.errors import RotaError

DEFAULT_WINDOW = 0.002
DEFAULT_MAX_BATCH = 256
Outcome = AppendResult | RotaError
CommitBatch = Callable[[Sequence[SubmitRequest]], list[Outcome]]


class _Slot:
    __slots__ = ("done", "outcome", "raised", "request")

    def __init__(self, request: SubmitRequest) -> None:
        self.request = request
        self.done = False
        self.outcome: Outcome | None = None
        self.raised: BaseException | None = None


class SubmitGroup:
    """Groups concurrent submits into shared transactions (see the module docstring)."""

    def __init__(
        self,
        commit: CommitBatch,
        *,
        window: float = DEFAULT_WINDOW,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        self._commit = commit
        self.window = window
        self.max_batch = max_batch
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Slot] = []
        self._leading = False
        self._arriving = 0
        self.batches = 0  # transactions appended (for tests and benchmarks)
        self.grouped = 0  # requests appended in shared ones

    def arrive(self) -> None:
        """A caller is on its way to `submit` (lets a leader wait for it); pair with
        `submit` or `leave`."""
        with self._cond:
            self._arriving += 1

    def leave(self) -> None:
        """A caller that `arrive()`d will not submit after all (it was refused first)."""
        with self._cond:
            self._arriving -= 1
            self._cond.notify_all()

    def submit(self, request: SubmitRequest) -> AppendResult:
        """Append `request`, grouped with whatever other callers submit meanwhile; returns
        what it recorded or raises its own refusal. The caller must have `arrive()`d."""
        slot = _Slot(request)
        with self._cond:
            self._queue.append(slot)
            self._cond.notify_all()
            while not slot.done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                batch = self._gather()
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    for done in batch:
                        done.done = True
                    self._arriving -= len(batch)
                    self._leading = False
                    self._cond.notify_all()
        if slot.raised is not None:
            raise slot.raised
        assert slot.outcome is not None
        if isinstance(slot.outcome, RotaError):
            raise slot.outcome
        return slot.outcome

    def _gather(self) -> list[_Slot]:
        """The next batch (under the lock): wait the window while callers still arrive,
        then take up to `max_batch` queued requests, one per Work."""
        deadline = time.monotonic() + self.window
        while len(self._queue) < min(self._arriving, self.max_batch):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cond.wait(remaining)
        batch: list[_Slot] = []
        works: set[str] = set()
        rest: list[_Slot] = []
        for slot in self._queue:
            if len(batch) < self.max_batch and slot.request.work_id not in works:
                works.add(slot.request.work_id)
                batch.append(slot)
            else:
                rest.append(slot)
        self._queue = rest
        return batch

    def _run(self, batch: list[_Slot]) -> None:
        """Commit the batch (outside the lock); on a failure of the whole append, each
        request alone. Every slot of the batch gets its outcome or the error it raised."""
        try:
            outcomes = self._commit([s.request for s in batch])
        except BaseException as whole:
            if len(batch) == 1:
                batch[0].raised = whole
                return
            for slot in batch:
                try:
                    slot.outcome = self._commit([slot.request])[0]
                except BaseException as own:
                    slot.raised = own
                self.batches += 1
            return
        self.batches += 1
        self.grouped += len(batch)
        for slot, outcome in zip(batch, outcomes, strict=True):
            slot.outcome = outcome
