"""The ports: every contract between rota's application layer and its adapters.

One module, so that what an adapter must do, and what the application may rely on, is
read in one place (as APScheduler 4's `abc.py`). Each contract says what is atomic, how
it is ordered and what each error means. Adapters live in `rota.infrastructure`;
`rota.bootstrap` chooses them. Projections and replay import the data types from here
without importing any adapter.

- `EventStore`: the append-only, hash-chained log (SQLite, PostgreSQL).
- `ProjectionStore`: the projections kept beside the log, with the position they applied.
- `Executor` and `LaunchContext`: how an attempt is launched, recovered, stopped, reached.
- `Clock`: the one source of the current time.
- `Gate` (with `GateAnswer`, `StartHold`) and `Environment`: the start gates and the
  run-environment hook a host is given.

## The event store

The event store contract: what every rota store (SQLite, PostgreSQL) promises.

The log is an ordered sequence of recorded events. Each has a **position** (1, 2, 3 ...,
gapless and increasing in commit order: a reader that has seen position N has seen every
event at or below N), a **stream** and a **version** within it (1, 2, 3 ..., unique together),
a **type** and **type_version**, an optional **delivery identity** (unique in the whole log),
the payload, the **recording time** (the store's clock) and a **hash** chained to the
previous event (see `rota.infrastructure.chain`).

Atomicity: one `append` writes all its events or none. Expected versions are checked for
every stream named in `expected` (a stream need not receive an event to be fenced); a
stale one raises `ConcurrencyConflict` and writes nothing.

Idempotency: an event whose delivery identity is already recorded is not written again;
`append` returns the recorded event in its place. If every event of an append is such a
duplicate, the append is a no-op that returns the originals, and expected versions are not
checked (a caller retrying after a lost acknowledgement gets its original answer). The same
identity with a different stream, type or payload raises `DeliveryConflict`.

The events an append returns are exactly as a later read or replay will see them: the
events given, where each is already what decoding its stored payload gives back
(`Codec.canonical`), the others decoded from what was stored (an `int` given for a `float`
field comes back a `float`, a payload dict the caller holds comes back rota's own copy).

Errors are the store error tree in `rota.application.errors`; driver exceptions never
escape. Stores are safe to share between threads; a store must not be used in a child
process after `fork()` (open it again there).

## Executors

The executor protocol: how rota launches an attempt and learns how it ended.

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

## The projection store

Projections (the scheduler's and the auditor's history) are folds of the log stored with
the position and log hash they applied, written in one transaction with their rows, so a
stored projection is exactly-once and restartable. A projection store never decides
anything: the log is the authority, and a stored projection that does not extend the log
(another log, a rewritten one, an older fold version) is refused on load
(`last_refusal` says why) and the caller folds from position 0. One process at a time
keeps a store (`writer_lock`); others read it.

## The clock

A `Clock` returns an aware UTC datetime (`now`) and a monotonic reading (`monotonic`).
Nothing in rota calls `datetime.now()` on its own; a fold reads time only from events. On
PostgreSQL the database's clock is the store's (`EventStore.now`). Elapsed time in the
host (renewal intervals, the run time of its own attempts) is monotonic.
"""

from __future__ import annotations

import abc
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

from rota.application.cancel_event import CancelEvent
from rota.application.timestamps import parse_timestamp
from rota.domain.events import Event
from rota.domain.policy import Binding, Registration
from rota.domain.results import Result
from rota.domain.state import AttemptState, PendingInput, WorkState
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import SchedulerProjection

# -- the event store ---------------------------------------------------------------------


class NewEvent(msgspec.Struct, frozen=True, gc=False):
    """An event to append to `stream`, with its optional delivery identity (`gc=False`, as
    `RecordedEvent`: it holds strings and an event, so it cannot form a cycle)."""

    stream: str
    event: Event
    delivery_id: str | None = None


class RecordedEvent(msgspec.Struct, frozen=True, gc=False):
    """An event as the log holds it, decoded to the current schema."""

    position: int
    stream: str
    version: int
    delivery_id: str | None
    recorded_at: str
    event: Event

    @property
    def type(self) -> str:
        return self.event.tag()

    @property
    def recorded_time(self) -> datetime:
        return parse_timestamp(self.recorded_at)


class RawRecord(msgspec.Struct, frozen=True):
    """A stored row exactly as written: what audit, export and import work on."""

    position: int
    stream: str
    version: int
    type: str
    type_version: int
    delivery_id: str | None
    data: str | bytes
    recorded_at: str
    hash: str


class LogHead(msgspec.Struct, frozen=True):
    """The last recorded position and its hash (position 0 and the genesis hash when empty)."""

    position: int
    hash: str


class AppendResult(msgspec.Struct, frozen=True):
    """What an append recorded: one entry per event given, in order; `written` new ones."""

    recorded: list[RecordedEvent]
    written: int

    @property
    def duplicate(self) -> bool:
        return self.written == 0 and bool(self.recorded)


class EventStore(abc.ABC):
    """An append-only, hash-chained event log. See the module docstring for the contract.

    `url` names the store (another handle opens it from the URL: `store_url.backend`);
    `path` is the one file the log is kept in (None for a store that is not a file);
    `clock` is the clock the store was opened with (None: the system's, or for PostgreSQL
    the database's), whose monotonic reading the host measures elapsed time with.
    """

    url: str
    path: Path | None = None
    clock: Clock | None = None

    def reopened(self) -> EventStore | None:
        """Another handle on this very log, opened as this one was (a read-only log opens
        read-only again, an in-memory one shares its log), for a child of this process to
        use; None: open `url` again."""
        return None

    @abc.abstractmethod
    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        """Append atomically; `expected[stream]` is the version the stream must be at (0: new)."""

    @abc.abstractmethod
    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events with position > after, in position order, at most `limit`."""

    @abc.abstractmethod
    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        """A stream's events with version > after, in version order."""

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several streams' events, each in version order, keyed by stream; a stream with
        no event is not a key. This default reads them one by one; a store may answer in
        one query (the submit of many new Works asks about each of them)."""
        found: dict[str, list[RecordedEvent]] = {}
        for stream in streams:
            events = self.read_stream(stream)
            if events:
                found[stream] = events
        return found

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        """Events of every stream whose name starts with `prefix` (non-empty), position >
        after (and <= upto), in position order, at most `limit`. This default filters
        `read`; the stores answer it from their (stream, version) index."""
        found: list[RecordedEvent] = []
        while len(found) < limit:
            batch = self.read(after, 5000)
            if not batch:
                break
            for r in batch:
                if upto is not None and r.position > upto:
                    return found
                if r.stream.startswith(prefix):
                    found.append(r)
                    if len(found) >= limit:
                        break
            after = batch[-1].position
        return found

    @abc.abstractmethod
    def stream_version(self, stream: str) -> int:
        """The stream's last version, 0 if it has no events."""

    @abc.abstractmethod
    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        """Stored rows with position > after, undecoded, in position order."""

    @abc.abstractmethod
    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        """The event recorded under a delivery identity, if any."""

    @abc.abstractmethod
    def head(self) -> LogHead:
        """The last position and hash."""

    @property
    @abc.abstractmethod
    def store_id(self) -> str:
        """The random identity the store got when it was created (checkpoints name it)."""

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        """Import rows exactly as they were recorded elsewhere (same positions, times, hashes).

        The first record's position must be head + 1 and its hash must link to the current
        head hash; positions must then run on without a gap, and every record's hash is
        recomputed from its content and the previous hash and must equal the one given.
        Anything else raises `StoreError` with code `import_mismatch`. All or nothing: one
        transaction. This is how `rota import` moves a log between stores; never use it to
        record new decisions (use `append`).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot import raw rows yet")

    @abc.abstractmethod
    def wait_for_commit(self, after: int, timeout: float) -> bool:
        """Block until the log holds a position > after (from any process) or timeout."""

    def wake_waiters(self) -> None:
        """Make every `wait_for_commit` in progress in this process return (False) now.

        How a loop that sleeps on the log is told to stop; waits begun later are unaffected.
        A store that cannot (none of rota's) leaves such waits to their timeout.
        """
        return None

    def deferring(self, *, ahead: bool = False) -> contextlib.AbstractContextManager[None]:
        """Appends of this thread inside return once committed, maybe not yet durable (a
        store whose durability wait can leave its write lock: SQLite on synchronous FULL);
        the caller must call `sync()` after the block before telling anyone they happened.

        `ahead`: the block goes on with work of its own after its appends (a cadence pass
        preparing its launches), so the store may begin making each commit durable at once,
        in the background, while that work runs. Without it the durability work waits for
        `sync()`: a block that only applies its own few events would pay more for handing
        the wait to another thread and back than the overlap saves. Either way nothing is
        durable, or may be told, before `sync()` returns. Nests (an `ahead` block makes the
        blocks inside it `ahead` too); the default store's commits are durable at once, and
        this does nothing."""
        return contextlib.nullcontext()

    def sync(self) -> None:
        """Make this thread's committed appends durable, unless an outer `deferring()`
        block of this thread is still open (it syncs); no-op when nothing is pending."""
        return None

    def nothing_after(self, position: int) -> bool:
        """True only when the store knows, without reading the log, that its head is
        `position` (this process wrote it and nobody has committed since); False when
        it does not know. Lets a writer skip the read that would find nothing new."""
        return False

    @abc.abstractmethod
    def now(self) -> datetime:
        """The store's clock: the time recorded events get and leases are judged by."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; idempotent."""

    def subscribe(
        self, after: int = 0, page: int = 1000, poll: float = 1.0
    ) -> Iterator[RecordedEvent]:
        """Yield every event after `after`, then wait for and yield new commits, forever.

        Stop by closing the generator (or breaking out of the loop).
        """
        position = after
        while True:
            batch = self.read(position, page)
            if batch:
                yield from batch
                position = batch[-1].position
                continue
            self.wait_for_commit(position, poll)

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the clock ---------------------------------------------------------------------------


class Clock(Protocol):
    """A source of the current time: wall time (aware UTC) and a monotonic reading.

    Wall time can step (an NTP correction, a suspended VM resumed); leases, deadlines and
    recorded times are wall time, judged by the store's clock. `monotonic()` never steps:
    the host measures elapsed time with it (when a renewal is due, how long the attempts
    this process runs have run), so a wall-clock step neither stops renewals nor times
    work out early (docs/operator.md, "Clock jumps").
    """

    def now(self) -> datetime:
        """Return the current time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back, unaffected by wall steps."""
        ...


# -- executors ---------------------------------------------------------------------------

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

    @classmethod  # noqa: B027 (an optional hook with a no-op default)
    def validate_config(cls, config: Mapping[str, Any]) -> None:
        """Refuse a binding's config this executor could never launch with: raise
        `InvalidExecutorConfig(field, problem)`; see "Configuration" above."""

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

    def detach(self) -> None:
        """A graceful stop: stop observing, and leave the attempts' work running for the
        next host to adopt (`recover`). The default is `close()`; an executor whose work
        outlives its process (the shell executor's detached process groups) overrides it."""
        self.close()


# -- the projection store ----------------------------------------------------------------


class ProjectionMeta(msgspec.Struct, frozen=True):
    """One stored projection's tracking row: fold version, position and log hash applied."""

    name: str
    version: int
    position: int
    log_hash: str
    digest: str | None
    rebuilt_at: str | None
    saved_at: str
    generation: int


class Persisted(Protocol):
    """What a projection store needs of a projection: identity, position, rows, dirty keys."""

    name: str
    version: int
    position: int
    dirty: set[str]

    def row(self, key: str) -> bytes | None: ...

    def row_keys(self) -> Iterator[str]: ...


class WriterLock(Protocol):
    """Exclusive, non-blocking, held until `release()` (or the holder's death)."""

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; False (at once) when another holder has it."""
        ...

    def release(self) -> None:
        """Give the lock up (a no-op when not held)."""
        ...


class ProjectionStore(abc.ABC):
    """Projections stored beside the log. See "The projection store" above.

    Every write is one transaction (rows, position, log hash); reads see one snapshot.
    Errors are `ProjectionStoreError` (`rota.application.errors`).
    """

    last_refusal: str | None
    # Whether `load_scheduler(lazy=True)` leaves quiet Works in the store, found on demand.
    lazy_works: bool = False

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """Where the projections are kept, for messages (a path, or a PostgreSQL schema)."""

    @abc.abstractmethod
    def meta(self, name: str) -> ProjectionMeta | None:
        """The tracking row of one projection, None when nothing is stored."""

    @abc.abstractmethod
    def metas(self) -> dict[str, ProjectionMeta]:
        """Every projection's tracking row, by name."""

    @abc.abstractmethod
    def row(self, name: str, key: str) -> bytes | None:
        """One stored row's value."""

    @abc.abstractmethod
    def rows(self, name: str) -> tuple[ProjectionMeta | None, list[tuple[str, bytes]]]:
        """A projection's meta and every row, read in one snapshot (in no set order)."""

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside the block (`meta`, `sorted_rows`, ...) sees one snapshot: a read
        transaction held until the block ends. The default: each read sees its own."""
        yield

    def sorted_rows(self, name: str) -> Iterator[tuple[str, bytes]]:
        """A projection's rows in key order (the keys' byte order), read as they are iterated,
        in the snapshot of an enclosing `snapshot()`: what `rota replay verify` and `rota
        doctor` stream through without holding every row. The default sorts `rows()`."""
        yield from sorted(self.rows(name)[1])

    @abc.abstractmethod
    def refusal(self, meta: ProjectionMeta | None, version: int, log: EventStore) -> str | None:
        """Why a stored projection cannot be used with this log and fold version, or None."""

    @abc.abstractmethod
    def load_scheduler(self, log: EventStore, *, lazy: bool = False) -> SchedulerProjection | None:
        """The stored scheduler projection, or None (see `last_refusal`) to fold from 0.

        `lazy`: hold only the Works some index names and find the quiet ones on demand
        (where `lazy_works`)."""

    @abc.abstractmethod
    def keep_on_disk(self, scheduler: SchedulerProjection, log: EventStore) -> None:
        """After its keeper saved `scheduler` here: find its Works not in memory on demand."""

    @abc.abstractmethod
    def work_rows(self, after: str, limit: int) -> tuple[int | None, list[tuple[str, bytes]]]:
        """The stored scheduler projection's position (None: nothing stored) and its first
        `limit` Work rows (`work/<id>`, the encoded Work) whose id sorts after `after`, in
        key order, read in one snapshot: what a listing pages through."""

    @abc.abstractmethod
    def load_history(self, log: EventStore) -> HistoryProjection | None:
        """The stored history projection, or None (see `last_refusal`)."""

    @abc.abstractmethod
    def save(
        self,
        projections: Persisted | Sequence[Persisted],
        log: EventStore | LogHead,
        *,
        digest: bool = False,
    ) -> int:
        """Write what each projection changed since its last save, its position and the log
        hash there, in one transaction; how many rows were written."""

    @abc.abstractmethod
    def replace(self, projections: Sequence[Persisted], log: EventStore | LogHead) -> None:
        """Swap in projections built afresh (a rebuild), all rows and metas in ONE
        transaction; a failure leaves the old projections intact."""

    @abc.abstractmethod
    def drop(self, name: str) -> None:
        """Forget a projection (rows and meta) in one transaction."""

    @abc.abstractmethod
    def attach(self, meta: ProjectionMeta) -> None:
        """Continue the stored projection `meta` describes as this writer's own."""

    @abc.abstractmethod
    def history_loader(self) -> Callable[[str], bytes | None]:
        """A loader reading history rows on demand (a store-backed `HistoryProjection`)."""

    @abc.abstractmethod
    def writer_lock(self) -> WriterLock:
        """The lock the one process keeping this store current holds."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; idempotent."""

    def __enter__(self) -> ProjectionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def registration_of(name: str, executor: Executor | type[Executor]) -> Registration:
    """How `executor` (an instance or, for class-level settings, its class) registers
    under `name`: its capacity pool and its capabilities, sorted."""
    return Registration(
        name=name, pool=executor.pool, capabilities=tuple(sorted(executor.capabilities))
    )


# -- start gates and the run environment --------------------------------------------------

# The run-environment hook: (work, attempt) -> variables for this launch (secrets included).
# Called off the loop before the launch; what it returns reaches the executor in `ctx.env`
# and nothing else. Raising fails the attempt (`environment_unavailable`).
Environment = Callable[[WorkState, AttemptState], dict[str, str]]


@dataclass(frozen=True)
class StartHold:
    """A start gate's answer that holds the Work's first start, with the reason people see."""

    reason: str


# What a start gate answers: None (or True) lets the start go on; a `StartHold` (or any
# object with a `reason`, or a string, its reason) holds the Work (`core.gate.held`).
GateAnswer = StartHold | str | bool | None
# A start gate: `gate(work, binding, first_input) -> GateAnswer`, asked before a Work's
# first attempt once capacity allows it, outside any store transaction, and in name order
# with the other gates (the first hold or error decides). `work` is the Work as the
# projection holds it; `binding` the one its attempt would pin; `first_input` the recorded
# input that would be the attempt's first: its `position` (acceptance sequence), `key`,
# `payload` and `correlation_key`; with trigger selection `last`, the input that would
# trigger it (the newest), otherwise the oldest pending. Raising fails closed: nothing is
# held and the next pass asks again.
Gate = Callable[[WorkState, Binding, PendingInput], GateAnswer]


# -- observing what was appended ----------------------------------------------------------

# An append observer: called by the transaction loop after each append with the events
# that append newly recorded, in log order (a repeated delivery identity's original is
# not new, so each decision is observed once, by the process that took it). It runs under
# the projection's lock: it must be quick, must not append, and sees only what this
# process wrote. One that raises is logged (its type only) and the append stands.
# Observers derive what an operator reads from what the log recorded: the decision log
# lines (rota.infrastructure.decision_lines), the attempt spans (infrastructure/tracing.py).
AppendObserver = Callable[[Sequence[RecordedEvent]], None]

# The W3C trace context of an attempt's launch (`traceparent`, `tracestate` when set):
# `(execution_id, epoch) -> headers`, empty when no trace is recorded. It reaches the
# executor as `ctx.trace` (shell jobs: $TRACEPARENT, $TRACESTATE) and nothing else.
TraceContext = Callable[[str, int], dict[str, str]]
