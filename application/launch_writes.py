"""Optimisation: concurrent launches' fenced writes share appends (and their fsyncs),
instead of one each (bench shell).

Group commit of the fenced writes concurrent launches make (phases, recovery metadata).

Every launch runs on a thread of its own and records its `executor` phase and its recovery
metadata as fenced writes: one append (one fsync) each, serialized by the transaction
lock. `GroupedFenced.write` lets them share appends the way a database shares a log
flush: a caller queues its write, and whoever holds the transaction lock next decides
every queued write on fresh state and appends them together. Writes to the same Work are
decided in the order they were queued, each on the state its predecessors in the batch
leave (`evolve`), and fenced by the Work's version before the batch. A write refused by
its decision (`Refusal`: a lost lease, too many phases) is refused to its caller alone;
if the combined append fails for any other reason, each write is retried on its own, so
one bad write never fails another's. Nothing waits for a window to fill: writes group
only while an append is in progress.

`write_many` queues several writes at once (a batch of launches pinning their recovery
metadata: `LifecycleCommands.persist_recovery_many`): they share one append and one
durability wait, and each is answered on its own.

A write queued with `wait=False` (the start of a launch phase: a trail, not a pin) does
not wait: it is appended with the next write any caller waits for, at the latest with its
own launch's next one (the phase's end, or the recovery metadata), in order. So a launch
phase's start and the launch's recovery metadata share one append.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from rota.application.ports import RecordedEvent
from rota.application.transactions import Transactions
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import Refusal
from rota.domain.evolve import evolve
from rota.domain.state import WorkState

log = logging.getLogger("rota.host")
FencedDecision = Callable[[WorkState, int, datetime], list[Emit]]


@dataclass
class _Write:
    execution_id: str
    decide: FencedDecision
    done: bool = False
    error: BaseException | None = None
    waited: bool = True  # False: nobody reads the error, it is logged


class GroupedFenced:
    """Fenced writes whose result nobody reads, grouped into shared appends."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx
        self._queue: list[_Write] = []
        self._queue_lock = threading.Lock()
        self.appends = 0  # appends made (tests and benchmarks read it)
        self.writes = 0
        # The log positions (first, last) of the latest appends made here: commits that hold
        # nothing but launch writes, which give the cadence nothing to do (`only_ours`).
        self._recent: deque[tuple[int, int]] = deque(maxlen=32)

    def only_ours(self, after: int, head: int) -> bool:
        """Whether the log's events in (after, head] are all launch writes appended here
        (then a pass woken by them would find nothing new to do)."""
        ranges = dict(list(self._recent))
        position = after
        while position < head:
            last = ranges.get(position + 1)
            if last is None:
                return False
            position = last
        return position == head

    def _appended(self, recorded: list[RecordedEvent]) -> None:
        positions = [r.position for r in recorded]
        if positions and max(positions) - min(positions) == len(set(positions)) - 1:
            self._recent.append((min(positions), max(positions)))

    def write(self, execution_id: str, decide: FencedDecision, wait: bool = True) -> None:
        """Append `decide`'s events for the attempt (fenced by its Work's version); raises
        its Refusal. Returns once they are durable; with `wait=False` at once (see the
        module docstring: a refusal or failure is only logged)."""
        if not wait:
            with self._queue_lock:
                self._queue.append(_Write(execution_id, decide, waited=False))
            return
        error = self.write_many([(execution_id, decide)])[0]
        if error is not None:
            raise error

    def write_many(self, writes: list[tuple[str, FencedDecision]]) -> list[BaseException | None]:
        """Several fenced writes (a batch of launches' recovery metadata), queued in order
        and appended together (with whatever else is queued): once they are durable, each
        one's refusal or error (None: written)."""
        items = [_Write(execution_id, decide) for execution_id, decide in writes]
        with self._queue_lock:
            self._queue.extend(items)
        for item in items:
            while not item.done:
                with self.tx.lock:
                    if not item.done:
                        self._flush()
        return [item.error for item in items]

    def _flush(self) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue, []
        if not batch:
            return
        try:
            self._append(batch)
        except Exception:
            for item in batch:  # every write on its own: one bad write fails only itself
                if not item.done:
                    self._alone(item)
        finally:
            for item in batch:
                item.done = True
                if not item.waited and item.error is not None:
                    log.info("launch write of %s not recorded: %s", item.execution_id, item.error)

    def _append(self, batch: list[_Write]) -> None:
        refused: dict[int, Refusal] = {}

        def decide() -> tuple[list[Emit], dict[str, int]]:
            refused.clear()
            now = self.tx.now()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            states: dict[str, WorkState] = {}  # as the batch's earlier writes leave them
            for index, item in enumerate(batch):
                try:
                    work, number = self.tx.execution(item.execution_id)
                    stream, version = work_stream(work.work_id), work.version
                    work = states.get(stream, work)
                    more = item.decide(work, number, now)
                except Refusal as refusal:
                    refused[index] = refusal
                    continue
                expected.setdefault(stream, version)
                position = self.tx.projection.position + len(emits)
                emits.extend(more)
                if counts[item.execution_id.rpartition("/")[0]] > 1:
                    for offset, emit in enumerate(more, 1):
                        if emit.stream == stream:
                            work = evolve(work, emit.event, position + offset, now) or work
                    states[stream] = work
            return emits, expected

        counts: dict[str, int] = {}
        for item in batch:
            work_id = item.execution_id.rpartition("/")[0]
            counts[work_id] = counts.get(work_id, 0) + 1

        result = self.tx.transact(decide)
        if result.written:
            self._appended(result.recorded)
        self.appends += 1
        self.writes += len(batch)
        for index, item in enumerate(batch):
            item.error = refused.get(index)
            item.done = True

    def _alone(self, item: _Write) -> None:
        def decide() -> tuple[list[Emit], dict[str, int]]:
            work, number = self.tx.execution(item.execution_id)
            emits = item.decide(work, number, self.tx.now())
            return emits, {work_stream(work.work_id): work.version}

        try:
            result = self.tx.transact(decide)
            if result.written:
                self._appended(result.recorded)
        except BaseException as exc:  # handed to its caller
            item.error = exc
        item.done = True
