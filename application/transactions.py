"""The transaction loop: catch up, decide, append with expected versions, apply, retry.

Every command follows the same path (see DESIGN.md, "The flow of one transition"): catch
the scheduler projection up to the log head, call a pure decision in `rota.domain`, append
its events with the expected version of every stream it read, and apply them. A
`ConcurrencyConflict` (another scheduler wrote first) re-reads and decides again, a bounded
number of times. One lock serializes the projection within a process; executors and other
blocking work never run under it. The command groups (`lifecycle`, `recovery`, `admission`,
`control`) decide; this loop is the only place that appends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from rota.application.errors import ConcurrencyConflict, PortCode, StoreUnavailable
from rota.application.live_projections import LiveProjections
from rota.application.ports import (
    AppendObserver,
    AppendResult,
    EventStore,
    NewEvent,
    ProjectionStore,
    RecordedEvent,
)
from rota.application.timestamps import recorded_times
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, Refusal
from rota.domain.state import WorkState
from rota.projections.scheduler import SchedulerProjection

MAX_CONFLICT_RETRIES = 16
FOLD_PAGE = 10_000  # events per read when folding from position 0
Decision = Callable[[], tuple[list[Emit], dict[str, int]]]
log = logging.getLogger("rota.transactions")


class Transactions:
    """One store, one in-memory scheduler projection, and the loop that writes to both."""

    def __init__(
        self,
        store: EventStore,
        *,
        projections: ProjectionStore | None = None,
        save_every: int = 5000,
    ) -> None:
        self.store = store
        self.projection = SchedulerProjection()
        self.lock = threading.RLock()
        self.conflicts = 0
        self.observers: list[AppendObserver] = []  # told what each append newly recorded
        # How long this process's appends took (for /metrics: rota_append_seconds).
        self.appends = 0
        self.append_seconds = 0.0
        # Folds that follow every batch the loop applies (the schedules projection).
        self.followers: list[Callable[[Sequence[RecordedEvent]], None]] = []
        # The projections stored beside the log: loaded at open (no replay when current),
        # saved every `save_every` events and at close.
        self.stored: LiveProjections | None = None
        if projections is not None:
            self.stored = LiveProjections(projections, store, save_every=save_every)
            self.projection = self.stored.open()

    # -- the log ----------------------------------------------------------------------

    def catch_up(self) -> int:
        """Apply every event the log holds beyond the projection; returns how many."""
        applied = 0
        with self.lock:
            if self.projection.position == 0:
                applied = self._fold_from_zero()
            while True:
                batch = self.store.read(self.projection.position, 5000)
                if not batch:
                    return applied
                self._apply(batch)
                applied += len(batch)

    def _fold_from_zero(self) -> int:
        """A projection with nothing applied (no stored one, or one refused) folds the log
        as a rebuild does (`fold_page`, indices derived once at the end), the history
        projection alongside; then it is saved as the cadence would. Returns how many."""
        projection, stored = self.projection, self.stored
        history = stored.history if stored is not None else None
        head = self.store.head().position
        folded = 0
        parsed: dict[str, datetime] = {}
        while projection.position < head:
            batch = self.store.read(projection.position, FOLD_PAGE)
            if not batch:
                break
            times = recorded_times(batch, parsed)
            projection.fold_page(batch, times, head)
            for follow in self.followers:
                follow(batch)
            if history is not None:
                history.fold_page(batch, times, head)
            folded += len(batch)
        projection.settle()
        if stored is not None and folded:
            stored.applied(projection, folded)
        return folded

    def _apply(self, recorded: Sequence[RecordedEvent]) -> None:
        projection, stored = self.projection, self.stored
        history = stored.history if stored is not None else None
        apply = projection.apply
        if history is None:
            for r, at in zip(recorded, recorded_times(recorded, {}), strict=True):
                apply(r.position, r.stream, r.version, at, r.event)
        else:
            # The history projection's fold beside the scheduler's (`LiveProjections.apply`,
            # called here directly: one call less an event).
            apply_history = history.apply
            for r, at in zip(recorded, recorded_times(recorded, {}), strict=True):
                position, stream, version, event = r.position, r.stream, r.version, r.event
                apply(position, stream, version, at, event)
                apply_history(position, stream, version, at, event)
        if stored is not None:
            stored.applied(projection, len(recorded))
        for follow in self.followers:
            follow(recorded)

    def save_projections(self) -> bool:
        """Save the stored projections now (they are saved every N events anyway)."""
        with self.lock:
            return self.stored is not None and self.stored.save(self.projection)

    def close_projections(self) -> None:
        with self.lock:
            stored, self.stored = self.stored, None
            if stored is not None:
                stored.close(self.projection)

    def _commit(self, emits: Sequence[Emit], expected: dict[str, int]) -> AppendResult:
        before = self.projection.position
        began = time.perf_counter()
        result = self.store.append(
            [NewEvent(e.stream, e.event, e.delivery_id) for e in emits], expected
        )
        self.appends += 1
        self.append_seconds += time.perf_counter() - began
        new = _past(result.recorded, before)
        try:
            # Apply what we wrote directly when it directly follows what the projection has
            # seen; otherwise another writer came between, and the log is read in order.
            if new and new[0].position == before + 1 and new[-1].position - before == len(new):
                self._apply(new)
            else:
                self.catch_up()
            return result
        finally:
            if self.observers and result.written:
                self._tell(new)

    def _tell(self, recorded: list[RecordedEvent]) -> None:
        """Hand the newly recorded events to each observer; one that fails is logged."""
        for observe in self.observers:
            try:
                observe(recorded)
            except Exception as exc:
                log.warning("an append observer failed: %s", type(exc).__name__)

    def transact(self, decide: Decision) -> AppendResult:
        """Decide on fresh state and append; on a conflict, catch up and decide again.

        The append is made durable (`EventStore.sync`) after the projection's lock is let
        go, so other threads decide and commit while this one waits on the disk; inside an
        outer `deferring()` block (a group commit), that block's owner syncs instead."""
        store = self.store
        try:
            with store.deferring(), self.lock:
                conflicted = False
                for _ in range(MAX_CONFLICT_RETRIES):
                    # Nothing to read when the store knows nobody committed since; after a
                    # conflict, always read: somebody did (its wake-up may be on its way).
                    if conflicted or not store.nothing_after(self.projection.position):
                        self.catch_up()
                    emits, expected = decide()
                    if not emits:
                        return AppendResult([], 0)
                    try:
                        return self._commit(emits, expected)
                    except ConcurrencyConflict:
                        self.conflicts += 1
                        conflicted = True
                        continue
                raise StoreUnavailable(
                    f"gave up after {MAX_CONFLICT_RETRIES} conflicting writes; "
                    "the store is contended"
                )
        finally:
            store.sync()

    def now(self) -> datetime:
        return self.store.now()

    def work(self, work_id: str) -> WorkState:
        work = self.projection.works.get(work_id)
        if work is None:
            raise Refusal(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
        return work

    def execution(self, execution_id: str) -> tuple[WorkState, int]:
        work_id, _, number = execution_id.rpartition("/")
        if not number.isdigit():
            raise Refusal(
                f"{execution_id!r} is not an execution id", code=PortCode.UNKNOWN_EXECUTION
            )
        return self.work(work_id), int(number)

    # -- fenced writes on behalf of an attempt -------------------------------------------

    def fenced(
        self, execution_id: str, decide: Callable[[WorkState, int, datetime], list[Emit]]
    ) -> AppendResult:
        def outer() -> tuple[list[Emit], dict[str, int]]:
            work, number = self.execution(execution_id)
            emits = decide(work, number, self.now())
            return emits, {work_stream(work.work_id): work.version}

        return self.transact(outer)

    def fenced_many(
        self,
        items: Sequence[tuple[str, int]],
        decide: Callable[[WorkState, int, int, datetime, int], list[Emit]],
    ) -> dict[str, Refusal]:
        """One append for several attempts; refused ones are left out and reported."""
        refused: dict[str, Refusal] = {}

        def outer() -> tuple[list[Emit], dict[str, int]]:
            refused.clear()
            now = self.now()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for index, (execution_id, epoch) in enumerate(items):
                try:
                    work, number = self.execution(execution_id)
                    emits.extend(decide(work, number, epoch, now, index))
                    expected[work_stream(work.work_id)] = work.version
                except Refusal as refusal:
                    refused[execution_id] = refusal
            return emits, expected

        self.transact(outer)
        return refused


def _past(recorded: Sequence[RecordedEvent], position: int) -> list[RecordedEvent]:
    """The events of `recorded` after `position`, once each, in position order (a duplicate
    delivery answers with the original event: recorded earlier, or twice in one append)."""
    # The common case, every event new and nobody writing between: positions follow on.
    previous = position
    for r in recorded:
        if r.position != previous + 1:
            break
        previous = r.position
    else:
        return list(recorded)
    unique = {r.position: r for r in recorded if r.position > position}
    return [unique[p] for p in sorted(unique)]
