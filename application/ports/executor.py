"""The executor protocol: how rota launches an attempt and learns how it ended.

An executor is registered under a name, belongs to a capacity pool, and declares its
capabilities (`stop`, `interrupt`, `inject`, `recover`). The host calls it **outside any
store transaction**; a blocked executor can never hold the store's lock.

Configuration
  `validate_config(config)` (a classmethod: no instance, no I/O) refuses a binding's config
  the executor could never launch with, raising `InvalidExecutorConfig(field, problem)`.
  It is called when a binding naming the executor is loaded from the config file (for
  the built-in executors), defined with `bind()`/`register()`, or found defined when the
  executor is registered: before any Work is accepted for it. It sees the config as
  `launch` will (`ctx.config`: without `environment`, whose values arrive in `ctx.env`).

Launch
  The host records the claim (the durable launch intent) and then the fenced invoke
  marker, and only then calls `launch(ctx, done)`. `launch` starts the work and returns
  promptly; when the attempt finishes or suspends, the executor calls `done(result)`
  exactly once, from any thread. If `launch` raises `ExecutorError`, nothing was started
  and the host records a failure (`executor_error`) with no error text from the executor.
  If it raises `InvalidExecutorConfig` (the config is wrong for a reason `validate_config`
  could not see, such as a `cwd` that no longer exists), the failure is permanent
  (`invalid_config`: no retry timer) and names only the field.

Launch acknowledgement (seed 001)
  An executor that declares `recover` must persist its recovery metadata
  (`ctx.persist_recovery`) before `launch` returns. A launch that returns without having
  done so (`launch_unacknowledged`), or that raises anything but `ExecutorError` or
  `LeaseLost` (`launch_ambiguous`), is recorded as a safe failure that keeps the attempt's
  capacity slot (`holds_resources`) until the executor's `stop` verifies nothing of it
  runs, or an operator confirms the stop: the slot is never freed on the executor's word.

Batched launches
  An executor whose launch is bounded in time (it never waits on anything but its own
  processes and the store) may declare `batch_launch = True` and implement
  `launch_many(launches, persist)`: the host then hands it every attempt of a pass it
  launches directly (no run-environment hook) as one task of its launch pool, a fixed
  small pool (`rota.application.launches`), instead of a thread per launch. Each
  `Launch` says what `launch` would have: `error` set to what it would have raised, else
  `done` is called once, as after `launch`. `persist(pairs)` pins the recovery metadata
  of several of its launches in one fenced append (one durability wait for them all): it
  answers, per pair, None (pinned: `ctx.recovery_persisted` is set) or the refusal or
  error `ctx.persist_recovery` would have raised. The launch acknowledgement is owed per
  launch as above. The default `launch_many` calls `launch` for each.

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
  or `"unknown"` (no evidence either way; raising counts the same): the host fails closed
  and does not recover it again at a higher epoch every lease. It records the failed
  recovery (`core.execution.recovery_failed` and a `recovery_failed` failure that keeps
  the attempt's slot), then calls `stop` and confirms the stop once `stop` verifies it
  (`settings.recovery_failure_limit` failed recoveries in a row hold the Work,
  `recovery_exhausted`). So answer `"unknown"` only when a later look could not do
  better: a `recover` that waits on something transient should wait for it. Recovery never
  calls `launch` to replace a process; only a relaunch (a launch that started nothing) does.
  Evidence about work of this very process is what it runs: an attempt it still runs, or
  ran to a result the log has not recorded (refused because the lease lapsed, as after a
  wall-clock jump), is `"attached"`, never `"stopped"`; keep such a result until `forget`.
  `forget` may block (it may remove a run directory), so the host calls it off its loop,
  unless the executor declares `quick_forget = True` (it only drops what it keeps in
  memory, or hands what blocks to a thread of its own, as the shell executor hands the
  removal of run directories to its cleaner) or does not override it (the default does
  nothing, and is not called).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from rota.application.ports.cancel_event import CancelEvent
from rota.domain.artifacts import Artifact, check_artifact
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.results import Result

StopEvidence = Literal["stopped", "unknown"]
Recovery = Literal["attached", "stopped", "not_started", "unknown"]
Done = Callable[[Result], None]
CAPABILITIES = frozenset({"stop", "interrupt", "inject", "recover"})


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
    # A `threading.Event` (a `CancelEvent`: its lock is made on the first wait).
    cancel: threading.Event = field(default_factory=CancelEvent)
    cancel_reason: BaseException | None = None
    resume: bool = False
    previous_owner: str | None = None
    injected: queue.SimpleQueue[tuple[int, Any]] = field(default_factory=queue.SimpleQueue)
    persist: Callable[[Any], None] = lambda metadata: None
    record_phase: Callable[[str, str | None], None] = lambda name, outcome: None
    # Set once `persist_recovery` succeeded: the launch acknowledgement an executor that
    # declares `recover` owes before `launch` returns.
    recovery_persisted: bool = False
    # The W3C trace context of this launch's span (`traceparent`, maybe `tracestate`):
    # empty unless tracing is on (rota[otel]). Never logged, never written to the log.
    trace: dict[str, str] = field(default_factory=dict)
    # The binding grants the attempt took (its config already has theirs applied).
    grants: tuple[str, ...] = ()
    # Artifact references added with `add_artifact` (the in-process executor records them
    # with the attempt's result, before the Result's own).
    artifacts: list[Artifact] = field(default_factory=list)

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

    def add_artifact(
        self, name: str, uri: str, *, digest: str | None = None, size: int | None = None
    ) -> Artifact:
        """Record a reference to something this attempt produced, kept with its outcome
        (the attempt's history, views, HTTP, export); refused at once (`invalid_artifact`)
        when malformed or its name was added before."""
        artifact = check_artifact(Artifact(name=name, uri=uri, digest=digest, size=size))
        if any(a.name == name for a in self.artifacts):
            raise InvalidCommand(
                f"artifact {name!r} was added before: names are unique within a result",
                code=DomainCode.INVALID_ARTIFACT,
            )
        self.artifacts.append(artifact)
        return artifact

    def persist_recovery(self, metadata: Any) -> None:
        """Fenced: store recovery metadata for this attempt; raises LeaseLost when stale."""
        self.persist(metadata)
        self.recovery_persisted = True

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


@dataclass
class Launch:
    """One attempt of a batched launch (`Executor.launch_many`): its context, its `done`,
    and what `launch` would have raised for it (None: launched)."""

    ctx: LaunchContext
    done: Done
    error: BaseException | None = None


# Pins several launches' recovery metadata in one fenced append: per pair, None (pinned)
# or what `ctx.persist_recovery` would have raised.
PersistMany = Callable[[Sequence[tuple[LaunchContext, Any]]], list[BaseException | None]]


def persist_each(pairs: Sequence[tuple[LaunchContext, Any]]) -> list[BaseException | None]:
    """`PersistMany` one by one, through each context's own `persist_recovery`."""
    answers: list[BaseException | None] = []
    for ctx, metadata in pairs:
        try:
            ctx.persist_recovery(metadata)
        except BaseException as exc:
            answers.append(exc)
        else:
            answers.append(None)
    return answers


class Executor(abc.ABC):
    """A registered executor. Subclasses set `name`, `pool` and `capabilities`."""

    name: str
    pool: str = "agents"
    capabilities: frozenset[str] = frozenset()
    stable: bool = False
    isolates: bool = False
    # True declares that `forget` never blocks (it drops what the executor keeps in memory,
    # or hands the rest to a thread of its own): the host then calls it on its loop instead
    # of on a task thread of its own.
    quick_forget: bool = False
    # True declares a bounded launch that `launch_many` serves in batches ("Batched launches").
    batch_launch: bool = False

    @classmethod  # noqa: B027 (an optional hook with a no-op default)
    def validate_config(cls, config: Mapping[str, Any]) -> None:
        """Refuse a binding's config this executor could never launch with: raise
        `InvalidExecutorConfig(field, problem)`; see "Configuration" above."""

    @abc.abstractmethod
    def launch(self, ctx: LaunchContext, done: Done) -> None:
        """Start the attempt; call `done(result)` exactly once when it ends or suspends."""

    def launch_many(self, launches: Sequence[Launch], persist: PersistMany) -> None:
        """Launch several attempts; see "Batched launches" above. The default launches
        each in turn (`persist` unused: each pins its own)."""
        for item in launches:
            try:
                self.launch(item.ctx, item.done)
            except BaseException as exc:
                item.error = exc

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

    def detach(self) -> None:
        """A graceful stop: stop observing, and leave the attempts' work running for the
        next host to adopt (`recover`). The default is `close()`; an executor whose work
        outlives its process (the shell executor's detached process groups) overrides it."""
        self.close()
