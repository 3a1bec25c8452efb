"""Group commit of the fenced writes concurrent launches make (phases, recovery metadata).

Every launch runs on a thread of its own and records its `executor` phase and its recovery
metadata as fenced writes: one append (one fsync) each, serialized by the transaction
lock. `GroupedFenced.write` lets them share appends the way a database shares a log
flush: a caller queues its write, and whoever holds the transaction lock next decides
every queued write on fresh state and appends them together, one per Work per append
(a second write to the same Work waits for the next one, so each decides on the state
its predecessor left). A write refused by its decision (`Refusal`: a lost lease, too many
phases) is refused to its caller alone; if the combined append fails for any other
reason, each write is retried on its own, so one bad write never fails another's.
Nothing waits for a window to fill: writes group only while an append is in progress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from rota.application.transactions import Transactions
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import Refusal
from rota.domain.state import WorkState

FencedDecision = Callable[[WorkState, int, datetime], list[Emit]]


@dataclass
class _Write:
    execution_id: str
    decide: FencedDecision
    done: bool = False
    error: BaseException | None = None


class GroupedFenced:
    """Fenced writes whose result nobody reads, grouped into shared appends."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx
        self._queue: list[_Write] = []
        self._queue_lock = threading.Lock()
        self.appends = 0  # appends made (tests and benchmarks read it)
        self.writes = 0

    def write(self, execution_id: str, decide: FencedDecision) -> None:
        """Append `decide`'s events for the attempt (fenced by its Work's version); raises
        its Refusal. Returns once they are durable."""
        item = _Write(execution_id, decide)
        with self._queue_lock:
            self._queue.append(item)
        while not item.done:
            with self.tx.lock:
                if not item.done:
                    self._flush()
        if item.error is not None:
            raise item.error

    def _flush(self) -> None:
        with self._queue_lock:
            batch: list[_Write] = []
            works: set[str] = set()
            rest: list[_Write] = []
            for item in self._queue:
                work_id = item.execution_id.rpartition("/")[0]
                (rest if work_id in works else batch).append(item)
                works.add(work_id)
            self._queue = rest
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

    def _append(self, batch: list[_Write]) -> None:
        refused: dict[int, Refusal] = {}

        def decide() -> tuple[list[Emit], dict[str, int]]:
            refused.clear()
            now = self.tx.now()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for index, item in enumerate(batch):
                try:
                    work, number = self.tx.execution(item.execution_id)
                    more = item.decide(work, number, now)
                except Refusal as refusal:
                    refused[index] = refusal
                    continue
                emits.extend(more)
                expected[work_stream(work.work_id)] = work.version
            return emits, expected

        self.tx.transact(decide)
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
            self.tx.transact(decide)
        except BaseException as exc:  # handed to its caller
            item.error = exc
        item.done = True
