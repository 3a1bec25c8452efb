"""Optimisation: the submits of many threads share one store transaction and its fsync,
instead of one each (bench submit_threads).

Group commit of concurrent submits: callers on many threads share one store transaction.

Leader/follower, as databases group their commits: a caller queues its request. While no
batch is being committed, the caller whose request completes the batch (as many queued as
callers are known to be arriving (`arrive()`) or as the last batch held: its callers come
straight back) takes it and commits it at once, on its own thread: nobody is woken to do
it. Until then the first caller queued waits for the rest, `window` seconds (2 ms by
default) at most, then commits whatever is queued. A batch is up to `max_batch` requests,
appended in ONE transaction (`LifecycleCommands.submit_batch`); each caller gets its own
result, or its own refusal: one bad submit does not fail the others. When the batch's
append fails as a whole (a store error, a payload over the store's limit), each request of
it is tried again on its own, so each caller gets its own error. A single caller never
waits (nothing else is arriving, the last batch held one): one thread's submit costs what
it did without grouping; when concurrency drops, one window is lost once.

Every caller sleeps on its own slot's lock and is woken only when it must run: its outcome
is in, or the batch it heads must be committed (the commit before it ended, or its window
ran out). Under the GIL each wake-up is a thread switch, so a batch of n callers costs n of
them: none is spent waking a waiting leader for every arrival.

On a store that syncs after its commits (`EventStore.deferring`: SQLite on FULL), the
committer commits inside `deferring()`, hands the lead on, and only then waits for the
disk (`sync`) before waking its callers: callers that queued meanwhile commit while this
batch's fsync runs (and their own sync waits only for what that fsync did not cover).
Batches are not split to make such overlap: an fsync covers only the commits made before
it began, so on a loaded disk two half batches cost two fsyncs where one batch costs one
(measured in bench/RESULTS.md, 2026-12-01 commitfast).

Two requests for the same Work, or on the same debounce or unique key, never share a
batch (the second is decided after the first is applied). Idempotency is the log's: each
input's delivery identity makes a retried submit a no-op, in a batch or alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from rota.application.ports import AppendResult, EventStore
from rota.domain.errors import RotaError
from rota.domain.submission import SubmitWork

DEFAULT_WINDOW = 0.002
DEFAULT_MAX_BATCH = 256
Outcome = AppendResult | RotaError
CommitBatch = Callable[[Sequence[SubmitWork]], list[Outcome]]


class _Slot:
    """One caller's request. `wake` is held (acquired) while its caller sleeps; it is
    released (`signalled`, under the group's lock) when the caller must look again: its
    outcome is in, or the batch it heads is its to commit."""

    __slots__ = ("deadline", "done", "outcome", "raised", "request", "signalled", "wake")

    def __init__(self, request: SubmitWork) -> None:
        self.request = request
        self.done = False
        self.signalled = False
        self.deadline = 0.0  # when it heads the forming batch: commit it by then
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

    State, under `_cond`'s lock: `_queue` (requests not yet taken into a batch),
    `_leading` (a batch is being committed and its committer will hand the lead on), and
    `_head` (the queued slot that commits the forming batch when its window ends)."""

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
        # Notified at every enqueue (cheap: nothing waits on it but tests watching the queue).
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Slot] = []
        self._leading = False
        self._head: _Slot | None = None
        self._active = 0  # callers between `arrive()` and their result
        self._last = 1  # the size of the last batch: how many callers were concurrent
        self.batches = 0  # transactions appended (for tests and benchmarks)
        self.grouped = 0  # requests appended in shared ones

    def arrive(self) -> None:
        """A caller is on its way to `submit` (lets the batch wait for it); pair with
        `submit` or `leave`."""
        with self._cond:
            self._active += 1

    def leave(self) -> None:
        """A caller that `arrive()`d will not submit after all (it was refused first)."""
        with self._cond:
            self._active -= 1
            head = self._due(None)
        if head is not None:
            head.wake.release()

    def submit(self, request: SubmitWork) -> AppendResult:
        """Append `request`, grouped with whatever other callers submit meanwhile; returns
        what it recorded or raises its own refusal. The caller must have `arrive()`d."""
        slot = _Slot(request)
        with self._cond:
            self._queue.append(slot)
            self._cond.notify_all()
            batch: list[_Slot] | None = None
            if not self._leading:
                if self._full():
                    batch = self._take()
                elif self._head is None:
                    self._lead_next(slot)
        while True:
            if batch is not None:
                self._commit_batch(batch, slot)
            if slot.done:
                return slot.result()
            batch = self._sleep(slot)

    # -- under the lock -------------------------------------------------------------------

    def _target(self) -> int:
        # Callers that just got their results come back at once: expect as many as the
        # last batch held (or as are active now, a batch on the disk included: its callers
        # join the next one rather than split it); a caller that stopped costs one window.
        return min(max(self._active, self._last), self.max_batch)

    def _full(self) -> bool:
        return len(self._queue) >= self._target()

    def _due(self, awake: _Slot | None) -> _Slot | None:
        """The head, when its batch just became full and it must be woken to commit it
        (not `awake`: that caller's thread runs, and looks for itself)."""
        head = self._head
        if head is None or head is awake or self._leading or not self._full():
            return None
        return head if self._signal(head) else None

    def _lead_next(self, slot: _Slot) -> None:
        self._head = slot
        slot.deadline = time.monotonic() + self.window

    def _signal(self, slot: _Slot) -> bool:
        """Mark `slot` to be woken; True: the caller must release its lock (outside)."""
        if slot.signalled:
            return False
        slot.signalled = True
        return True

    def _take(self) -> list[_Slot]:
        """The next batch: up to `max_batch` queued requests, one per Work and one per
        coalescing key (a debounce or unique submit is decided on the key's holder)."""
        limit = self.max_batch
        batch: list[_Slot] = []
        works: set[str] = set()
        rest: list[_Slot] = []
        for slot in self._queue:
            names = _names(slot.request)
            if len(batch) < limit and works.isdisjoint(names):
                works.update(names)
                batch.append(slot)
            else:
                rest.append(slot)
        self._queue = rest
        self._last = len(batch)
        self._leading = True
        self._head = None
        return batch

    # -- sleeping and committing ----------------------------------------------------------

    def _sleep(self, slot: _Slot) -> list[_Slot] | None:
        """Sleep until `slot` is done (None) or heads a batch that is due (returned: the
        caller commits it)."""
        while True:
            with self._cond:
                if slot.done:
                    return None
                timeout = -1.0
                if self._head is slot and not self._leading:
                    if self._full():
                        return self._take()
                    timeout = slot.deadline - time.monotonic()
                    if timeout <= 0:
                        return self._take()
            woken = slot.wake.acquire(timeout=timeout)
            if woken:
                with self._cond:
                    slot.signalled = False

    def _commit_batch(self, batch: list[_Slot], own: _Slot) -> None:
        """Commit `batch`, hand the lead to the first slot still queued, wait until the batch
        is durable, and wake its callers. `own` is the committer's slot: its thread is
        awake, so it is never woken."""
        store = self._store
        try:
            if store is None:
                self._run(batch)
            else:
                with store.deferring():
                    self._run(batch)
        finally:
            wake: _Slot | None = None
            with self._cond:
                self._leading = False
                if self._queue:
                    self._lead_next(self._queue[0])
                    if self._queue[0] is not own and self._signal(self._queue[0]):
                        wake = self._queue[0]
            if wake is not None:
                wake.wake.release()
            try:
                if store is not None:
                    store.sync()
            except BaseException as exc:
                for slot in batch:  # written, not yet durable: the caller must not trust it
                    if slot.raised is None and not isinstance(slot.outcome, RotaError):
                        slot.raised = exc
            finally:
                woken: list[_Slot] = []
                with self._cond:
                    self._active -= len(batch)
                    for done in batch:
                        done.done = True
                        if done is not own and self._signal(done):
                            woken.append(done)
                    head = self._due(own)  # fewer callers to wait for now
                    if head is not None:
                        woken.append(head)
                for done in woken:
                    done.wake.release()

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


def _names(request: SubmitWork) -> tuple[str, ...]:
    """What a request decides on alone in its batch: its Work, and its coalescing key."""
    if request.debounce is not None:
        return (request.work_id, f"debounce/{request.debounce.key}")
    if request.unique is not None:
        return (request.work_id, f"unique/{request.unique.key}")
    return (request.work_id,)
