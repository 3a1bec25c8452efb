"""The executor protocol: how rota launches an attempt and learns how it ended.

An executor is registered under a name, belongs to a capacity pool, and declares its
capabilities (`stop`, `interrupt`, `inject`, `recover`). The host calls it **outside any
store transaction**; a blocked executor can never hold the store's lock.

Launch
  The host records the claim (the durable launch intent) and then the fenced invoke
  marker, and only then calls `launch(ctx, done)`. `launch` starts the work and returns
  promptly; when the attempt finishes or suspends, the executor calls `done(result)`
  exactly once, from any thread. If `launch` raises, nothing was started and the host
  records a failure (`executor_error`) with no error text from the executor.

Cancellation
  `ctx.cancel` is a `threading.Event`. The host sets it when the lease is lost (then
  `ctx.cancel_reason` is a `rota.LeaseLost`), when the attempt is interrupted or the Work
  cancelled, or at shutdown. A launch should stop promptly when it is set; its later fenced
  writes are refused anyway.

Fenced callbacks
  `ctx.persist_recovery(metadata)` stores bounded opaque JSON the executor needs to find
  its process again after a crash (it raises `LeaseLost` if the lease is gone);
  `ctx.phase(name)` records a launch phase as it begins and ends.

Recovery
  After a lost lease, recovery claims the attempt at a higher epoch and, unless it relaunches
  it, calls `recover(ctx, metadata, done)` with the metadata the attempt persisted. The
  executor answers `"attached"` (it found the attempt's work still running, or finished
  with a result it can report, and will call `done(result)`), `"stopped"` (verified that
  nothing of it runs and no result exists: the attempt is lost), `"not_started"` (verified
  that the work never started and never will: the attempt is relaunched, failing nothing)
  or `"unknown"` (the host fails closed and tries again on a later pass). Recovery never
  calls `launch` to replace a process; only a relaunch (a launch that started nothing) does.

  `stable = True` declares that the executor's behaviour is fully determined by what the
  attempt pinned (binding config, registration), so it may serve attempts pinned under an
  older configuration generation. Other executors serve only their own generation unless
  registered as historical executors for an older one.

Stop evidence
  `stop(execution_id, epoch, metadata)` stops whatever the attempt left running and
  returns `"stopped"` only when it verified that nothing of it still runs, else `"unknown"`.
  Only verified evidence frees the attempt's capacity slot.

Secrets and the run environment reach the executor in `ctx.env`; they are never written to
the log.
"""

from __future__ import annotations

import abc
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from rota.domain.results import Result

StopEvidence = Literal["stopped", "unknown"]
Recovery = Literal["attached", "stopped", "not_started", "unknown"]
Done = Callable[[Result], None]
CAPABILITIES = frozenset({"stop", "interrupt", "inject", "recover"})


class ExecutorError(Exception):
    """An executor could not launch; its text is logged by the host, never stored."""


@dataclass
class LaunchContext:
    """Everything an executor needs for one launch of one attempt (one segment)."""

    work_id: str
    attempt: int
    epoch: int
    inputs: list[Any]
    input_positions: list[int]
    config: dict[str, Any]
    deadline: datetime
    env: dict[str, str] = field(default_factory=dict)
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: BaseException | None = None
    resume: bool = False
    previous_owner: str | None = None
    injected: queue.SimpleQueue[tuple[int, Any]] = field(default_factory=queue.SimpleQueue)
    persist: Callable[[Any], None] = lambda metadata: None
    record_phase: Callable[[str, str | None], None] = lambda name, outcome: None

    @property
    def execution_id(self) -> str:
        return f"{self.work_id}/{self.attempt}"

    @property
    def trigger(self) -> Any:
        return self.inputs[0] if self.inputs else None

    def take_injected(self) -> list[tuple[int, Any]]:
        """Inputs injected while running, as (log position, payload); list the positions
        you consumed in the Result (`Result(consumed=[...])`)."""
        taken: list[tuple[int, Any]] = []
        while not self.injected.empty():
            taken.append(self.injected.get_nowait())
        return taken

    def persist_recovery(self, metadata: Any) -> None:
        """Fenced: store recovery metadata for this attempt; raises LeaseLost when stale."""
        self.persist(metadata)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record a launch phase: begun now, ended ok / failed / cancelled on exit."""
        self.record_phase(name, None)
        try:
            yield
        except BaseException:
            self.record_phase(name, "cancelled" if self.cancel.is_set() else "failed")
            raise
        self.record_phase(name, "ok")


class Executor(abc.ABC):
    """A registered executor. Subclasses set `name`, `pool` and `capabilities`."""

    name: str
    pool: str = "agents"
    capabilities: frozenset[str] = frozenset()
    stable: bool = False
    isolates: bool = False

    @abc.abstractmethod
    def launch(self, ctx: LaunchContext, done: Done) -> None:
        """Start the attempt; call `done(result)` exactly once when it ends or suspends."""

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        """Find the attempt's work after a lost lease; see "Recovery" above."""
        return "unknown"

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        """Stop what the attempt left running; "stopped" only when verified."""
        return "unknown"

    def forget(self, execution_id: str, epoch: int) -> None:  # noqa: B027 (optional hook)
        """The attempt's outcome is now durable in the log: drop what was kept to report it
        after a crash (a run directory ...)."""

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        """Ask a running attempt to stop; True when the request was delivered."""
        return False

    def inject(self, execution_id: str, epoch: int, position: int, payload: Any) -> str:
        """Offer an input (log position, payload) to a running attempt.

        Return "accepted" (taken for the attempt; consumed only when its result lists the
        position) or "not_accepting". Raise `ExecutorError` for a definite failure (the
        binding's pinned fallback applies); any other exception counts as an ambiguous
        delivery, retried later under the same intent.
        """
        return "not_accepting"

    def close(self) -> None:  # noqa: B027 (optional hook with a no-op default)
        """Release resources (threads, processes) at scheduler shutdown."""
