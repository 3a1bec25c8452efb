"""Handles on submitted Work: `Scheduler.submit()` returns a `WorkHandle` to wait on.

A handle waits for its Work to **settle**:
- a run-once Work settles when it is completed, failed (permanently, or its retry budget
  is exhausted) or cancelled (`WorkView.settled`);
- a standing Work never completes; its handle settles when the input this submit
  accepted was consumed for good: an attempt that took it has ended and the input is not
  pending again (a failed attempt that re-queues its input does not settle it), or when
  the Work failed or was cancelled. A standing Work submitted without input has no input
  to wait for: its handle settles only when the Work fails or is cancelled.

Waiting never sleeps on a timer to poll: it blocks in the store's `wait_for_commit`,
which a commit of this process wakes at once (a daemon thread running the Work, another
thread's submit, ...). A commit by another process on the same store is seen by the
store's own commit watch (on SQLite the log head is re-read at most every 50 ms; on
PostgreSQL a LISTEN notification); besides, the view is re-read at least every
`RECHECK_SECONDS`, a bounded re-check that catches anything the watch could miss.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from rota.api_errors import WaitTimeout, WorkCancelled, WorkFailed
from rota.application.ports import EventStore
from rota.application.queries.work_views import AttemptView, WorkView
from rota.domain.errors import DomainCode, Refusal

RECHECK_SECONDS = 1.0
SUCCESS_OUTCOMES = frozenset({"completed", "handoff"})

T = TypeVar("T")


class WorkHandle(Generic[T]):
    """A submitted Work: its id, its current view, and waiting for its result.

    `T` is the type of the result: what the binding's callable returns when the Work was
    submitted with a `TypedBinding[T]` (what `Scheduler.register` returns), `Any` when it
    was submitted with a binding's name."""

    def __init__(
        self,
        work_id: str,
        *,
        read: Callable[[str], WorkView | None],
        store: EventStore,
        kind: str,
        input_position: int | None,
    ) -> None:
        self.work_id = work_id
        self.kind = kind
        # The log position of the input this submit accepted (its acceptance sequence);
        # None when it accepted none.
        self.input_position = input_position
        self._read = read
        self._store = store

    def __repr__(self) -> str:
        return f"WorkHandle({self.work_id!r}, input_position={self.input_position})"

    def view(self) -> WorkView:
        """The Work's current view (caught up to the log head)."""
        view = self._read(self.work_id)
        if view is None:
            raise Refusal(f"no Work {self.work_id!r}", code=DomainCode.UNKNOWN_WORK)
        return view

    def settled(self, view: WorkView | None = None) -> bool:
        """Whether the Work (in `view`, or now) has settled, as the module says."""
        view = view if view is not None else self.view()
        if view.settled:
            return True
        return self.kind == "standing" and self._consumer(view) is not None

    def wait(self, timeout: float | None = None) -> WorkView:
        """Block until the Work settles and return its view then; `wait_timeout`
        (`WaitTimeout`, also a `TimeoutError`) when `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            head = self._store.head().position  # before reading: no commit can slip by
            view = self.view()
            if self.settled(view):
                return view
            pause = RECHECK_SECONDS
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(
                        f"Work {self.work_id!r} is still {view.state} after {timeout} s"
                    )
                pause = min(pause, remaining)
            self._store.wait_for_commit(head, pause)

    def result(self, timeout: float | None = None) -> T:
        """Wait (as `wait`) and return the result value (the data) of the attempt that
        completed the Work (standing: that consumed this submit's input). A failed Work
        raises `WorkFailed` (`work_failed`), a cancelled one `WorkCancelled`."""
        value: T = outcome_of(self, self.wait(timeout))
        return value

    def _consumer(self, view: WorkView) -> AttemptView | None:
        """The ended attempt that consumed this submit's input for good, if any."""
        position = self.input_position
        if position is None or any(p.position == position for p in view.pending):
            return None
        for attempt in reversed(view.attempts):
            if position in attempt.consumed and attempt.state == "ended":
                return attempt
        return None


def outcome_of(handle: WorkHandle[Any], view: WorkView) -> Any:
    """The result value of a settled Work's view, or its failure raised (`result()`)."""
    attempt = handle._consumer(view) if handle.kind == "standing" else None
    if attempt is not None and attempt.outcome in SUCCESS_OUTCOMES:
        return attempt.data
    if attempt is None and view.state == "completed":
        done = [a for a in view.attempts if a.outcome in SUCCESS_OUTCOMES]
        return done[-1].data if done else None
    if view.state == "cancelled":
        raise WorkCancelled(f"Work {view.id!r} was cancelled", view=view)
    failed = attempt if attempt is not None else _last_failure(view)
    error = failed.error if failed is not None else None
    detail = f": {error.code}: {error.message}" if error is not None else ""
    raise WorkFailed(f"Work {view.id!r} failed{detail}", view=view, attempt_error=error)


def _last_failure(view: WorkView) -> AttemptView | None:
    return next((a for a in reversed(view.attempts) if a.error is not None), None)


__all__ = ["RECHECK_SECONDS", "WorkHandle", "outcome_of"]
