"""Group commit of concurrent submits: callers on many threads share one store transaction.

Leader/follower, as databases group their commits: a caller queues its request; if no
other caller is committing, it becomes the leader, waits a short window (`window`
seconds, 2 ms by default) only while fewer requests are queued than callers are known
to be arriving (`arrive()`) or than the last batch held (its callers come straight
back), then appends up to `max_batch` queued requests in ONE
transaction (`LifecycleCommands.submit_batch`) and hands every follower its own result,
or its own refusal: one bad submit does not fail the others. When the batch's append
fails as a whole (a store error, a payload over the store's limit), each request of it is
tried again on its own, so each caller gets its own error. A single caller never waits
(nothing else is arriving, the last batch held one): one thread's submit costs what it
did without grouping; when concurrency drops, one window is lost once.

On a store that syncs after its commits (`EventStore.deferring`: SQLite on FULL), the
leader commits inside `deferring()`, hands the lead on, and only then waits for the
disk (`sync`) before waking its callers: callers that queued meanwhile commit while this
batch's fsync runs (and their own sync waits only for what that fsync did not cover).
Batches are not split to make such overlap: an fsync covers only the commits made before
it began, so on a loaded disk two half batches cost two fsyncs where one batch costs one
(measured in bench/RESULTS.md, 2026-12-01 commitfast).

Two requests for the same Work never share a batch (the second is decided after the
first is applied). Idempotency is the log's: each input's delivery identity makes a
retried submit a no-op, in a batch or alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from rota.application.lifecycle import SubmitRequest
from rota.application.ports import AppendResult, EventStore
from rota.domain.errors import RotaError

DEFAULT_WINDOW = 0.002
DEFAULT_MAX_BATCH = 256
Outcome = AppendResult | RotaError
CommitBatch = Callable[[Sequence[SubmitRequest]], list[Outcome]]


class _Slot:
    """One caller's request; `wake` is held (acquired) until its caller is to run: its
    outcome is in, or it was promoted to lead the next batch."""

    __slots__ = ("done", "outcome", "raised", "request", "wake")

    def __init__(self, request: SubmitRequest) -> None:
        self.request = request
        self.done = False
        self.outcome: Outcome | None = None
        self.raised: BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()

    def result(self) -> AppendResult:
        if self.raised is not None:
            raise self.raised
        assert self.outcome is not None
        if isinstance(self.outcome, RotaError):
            raise self.outcome
        return self.outcome


class SubmitGroup:
    """Groups concurrent submits into shared transactions (see the module docstring).

    Only the leader waits on the group's condition (for arrivals, within the window);
    every follower sleeps on its own slot's lock, released once: when its outcome is in,
    or when the finishing leader promotes it (the first still queued) to lead next. So a
    commit wakes exactly its callers, not every waiting thread."""

    def __init__(
        self,
        commit: CommitBatch,
        *,
        window: float = DEFAULT_WINDOW,
        max_batch: int = DEFAULT_MAX_BATCH,
        store: EventStore | None = None,
    ) -> None:
        self._commit = commit
        self._store = store
        self.window = window
        self.max_batch = max_batch
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Slot] = []
        self._leading = False
        self._arriving = 0
        self._last = 1  # the size of the last batch: how many callers were concurrent
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
            lead = not self._leading
            self._leading = True
            self._cond.notify_all()  # a leader gathering a batch counts its arrivals
        while True:
            if not lead:
                slot.wake.acquire()  # released once: done, or promoted to lead
                if slot.done:
                    return slot.result()
            lead = False
            promoted = self._lead(slot)
            if slot.done:
                return slot.result()
            lead = promoted is slot  # still queued: lead again, or wait for its turn

    def _lead(self, own: _Slot) -> _Slot | None:
        """Gather and commit one batch, hand the lead to the first slot still queued
        (returned; None: no one waits, nobody leads), wait until the batch is durable,
        and wake its callers. `own` is the leader's slot: its thread is awake, so it is
        never released."""
        with self._cond:
            batch = self._gather()
        store = self._store
        try:
            if store is None:
                self._run(batch)
            else:
                with store.deferring():
                    self._run(batch)
        finally:
            with self._cond:
                self._arriving -= len(batch)
                promoted = self._queue[0] if self._queue else None
                self._leading = promoted is not None
            if promoted is not None and promoted is not own:
                promoted.wake.release()
            try:
                if store is not None:
                    store.sync()
            except BaseException as exc:
                for slot in batch:  # written, not yet durable: the caller must not trust it
                    if slot.raised is None and not isinstance(slot.outcome, RotaError):
                        slot.raised = exc
            finally:
                with self._cond:
                    for done in batch:
                        done.done = True
                for done in batch:
                    if done is not own:
                        done.wake.release()
        return promoted

    def _gather(self) -> list[_Slot]:
        """The next batch (under the lock): wait the window while callers still arrive,
        then take up to `max_batch` queued requests, one per Work."""
        deadline = time.monotonic() + self.window
        limit = self.max_batch
        # Callers that just got their results come back at once: expect as many as the
        # last batch held (or as are arriving now); a caller that stopped costs one window.
        while len(self._queue) < min(max(self._arriving, self._last), limit):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._cond.wait(remaining)
        batch: list[_Slot] = []
        works: set[str] = set()
        rest: list[_Slot] = []
        for slot in self._queue:
            if len(batch) < limit and slot.request.work_id not in works:
                works.add(slot.request.work_id)
                batch.append(slot)
            else:
                rest.append(slot)
        self._queue = rest
        self._last = len(batch)
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
