"""The application service: read state, decide, append, apply, retry on conflict.

Every command follows the same path (see DESIGN.md, "The flow of one transition"): catch
the scheduler projection up to the log head, call a pure decision in `rota.domain`, append
its events with the expected version of every stream it read, and apply them. A
`ConcurrencyConflict` (another scheduler wrote first) re-reads and decides again, a bounded
number of times. One lock serializes the projection within a process; executors and other
blocking work never run under it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from rota.domain import admission, lifecycle
from rota.domain.admission import GateDecision, Waiting
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import NotEligible, Refusal
from rota.domain.policy import Binding, Pinned, Registration, Settings
from rota.domain.results import Result
from rota.domain.state import AttemptState, WorkState
from rota.projections.scheduler import SchedulerProjection

from .clock import recorded_times
from .errors import ConcurrencyConflict, StoreUnavailable
from .live_projections import LiveProjections
from .projection_store import ProjectionStore
from .secrets import split_secrets
from .store import AppendResult, EventStore, NewEvent, RecordedEvent

log = logging.getLogger("rota.scheduler")
MAX_CONFLICT_RETRIES = 16
FOLD_PAGE = 10_000  # events per read when folding from position 0
Decision = Callable[[], tuple[list[Emit], dict[str, int]]]


class Claimed(msgspec.Struct, frozen=True):
    """An attempt this service just claimed (or resumed), ready to launch."""

    work: WorkState
    attempt: AttemptState
    resume: bool


class StartPass(msgspec.Struct):
    claimed: list[Claimed]
    waiting: list[Waiting]
    asks: list[str] = msgspec.field(default_factory=list)


def config_generation(bindings: dict[str, Binding], registrations: dict[str, Registration]) -> str:
    """A content hash of the bindings and registrations: stable across restarts."""
    blob = msgspec.json.encode(
        [sorted(bindings.items()), sorted(registrations.items())], order="sorted"
    )
    return hashlib.sha256(blob).hexdigest()[:12]


class LifecycleService:
    """Commands of the lifecycle over one store, with one in-memory scheduler projection.

    `SchedulerService` (below) adds recovery, admission and control commands, each in
    its own module; this class is the core they all build on (`transact`, `_fenced`).
    """

    def __init__(
        self,
        store: EventStore,
        *,
        settings: Settings,
        owner: str,
        bindings: dict[str, Binding] | None = None,
        registrations: dict[str, Registration] | None = None,
        projections: ProjectionStore | None = None,
        save_every: int = 5000,
    ) -> None:
        self.store = store
        self.settings = settings
        self.owner = owner
        self.bindings: dict[str, Binding] = {}
        # Each binding's `environment` values: in memory only, handed to the executor at
        # launch (rota.infrastructure.secrets); the binding keeps only their digest.
        self._secrets: dict[str, dict[str, str]] = {}
        for binding in (bindings or {}).values():
            self._define(binding)
        self.registrations: dict[str, Registration] = dict(registrations or {})
        self.projection = SchedulerProjection()
        self.lock = threading.RLock()
        self.conflicts = 0
        self._generation: str | None = None
        self._pinned: dict[str, Pinned] = {}
        # The projections stored beside the log: loaded at open (no replay when current),
        # saved every `save_every` events and at close.
        self.stored: LiveProjections | None = None
        if projections is not None:
            self.stored = LiveProjections(projections, store, save_every=save_every)
            self.projection = self.stored.open()

    # -- configuration --------------------------------------------------------------

    @property
    def generation(self) -> str:
        if self._generation is None:
            self._generation = config_generation(self.bindings, self.registrations)
        return self._generation

    def set_binding(self, binding: Binding) -> None:
        """Define or redefine a binding: a new configuration generation."""
        with self.lock:
            self._define(binding)
            self._configured()

    def _define(self, binding: Binding) -> None:
        pinnable, secrets = split_secrets(binding)
        self.bindings[binding.name] = pinnable
        self._secrets[binding.name] = secrets

    def secrets_for(self, attempt: AttemptState) -> dict[str, str]:
        """The current `environment` values of the attempt's binding, for its launch.

        Values are resolved now, not pinned: an attempt relaunched after its binding's
        environment changed gets the current values, and the change is logged (by name).
        """
        binding = attempt.pinned.binding
        secrets = self._secrets.get(binding.name, {})
        current = self.bindings.get(binding.name)
        if current is not None and current.secrets_digest != binding.secrets_digest:
            log.warning(
                "binding %s: its environment changed since attempt %s was pinned; "
                "launching with the current values",
                binding.name,
                attempt.execution_id,
            )
        return dict(secrets)

    def set_registration(self, registration: Registration) -> None:
        """Register an executor: a new configuration generation."""
        with self.lock:
            self.registrations[registration.name] = registration
            self._configured()

    def _configured(self) -> None:
        self._generation = None
        self._pinned.clear()

    def pinned_for(self, binding_name: str) -> Pinned:
        pinned = self._pinned.get(binding_name)
        if pinned is None:
            pinned = self._pinned[binding_name] = self._pin(binding_name)
        return pinned

    def _pin(self, binding_name: str) -> Pinned:
        binding = self.bindings.get(binding_name)
        if binding is None:
            raise NotEligible(f"binding {binding_name!r} is not configured", code="unknown_binding")
        registration = self.registrations.get(binding.executor)
        if registration is None:
            raise NotEligible(
                f"binding {binding_name!r} names executor {binding.executor!r}, "
                "which is not registered",
                code="unknown_executor",
            )
        return Pinned(
            generation=self.generation,
            binding=binding,
            registration=registration,
            timeout_seconds=binding.timeout_seconds or self.settings.timeout_seconds,
            lease_seconds=self.settings.lease_seconds,
            max_segments=self.settings.max_segments,
        )

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
            if history is not None:
                history.fold_page(batch, times, head)
            folded += len(batch)
        projection.settle()
        if stored is not None and folded:
            stored.applied(projection, folded)
        return folded

    def _apply(self, recorded: Sequence[RecordedEvent]) -> None:
        projection, stored = self.projection, self.stored
        for r, at in zip(recorded, recorded_times(recorded, {}), strict=True):
            projection.apply(r.position, r.stream, r.version, at, r.event)
            if stored is not None:
                stored.apply(r.position, r.stream, r.version, at, r.event)
        if stored is not None:
            stored.applied(projection, len(recorded))

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
        result = self.store.append(
            [NewEvent(e.stream, e.event, e.delivery_id) for e in emits], expected
        )
        # Apply what we wrote directly when it directly follows what the projection has
        # seen; otherwise another writer came between, and the log is read in order.
        unique = {r.position: r for r in result.recorded if r.position > self.projection.position}
        ordered = [unique[p] for p in sorted(unique)]
        follows = bool(ordered) and ordered[0].position == self.projection.position + 1
        if follows and ordered[-1].position - ordered[0].position + 1 == len(ordered):
            self._apply(ordered)
            return result
        self.catch_up()
        return result

    def transact(self, decide: Decision) -> AppendResult:
        """Decide on fresh state and append; on a conflict, catch up and decide again."""
        with self.lock:
            for _ in range(MAX_CONFLICT_RETRIES):
                self.catch_up()
                emits, expected = decide()
                if not emits:
                    return AppendResult([], 0)
                try:
                    return self._commit(emits, expected)
                except ConcurrencyConflict:
                    self.conflicts += 1
                    continue
            raise StoreUnavailable(
                f"gave up after {MAX_CONFLICT_RETRIES} conflicting writes; the store is contended"
            )

    def now(self) -> datetime:
        return self.store.now()

    def _work(self, work_id: str) -> WorkState:
        work = self.projection.works.get(work_id)
        if work is None:
            raise Refusal(f"no Work {work_id!r}", code="unknown_work")
        return work

    def _execution(self, execution_id: str) -> tuple[WorkState, int]:
        work_id, _, number = execution_id.rpartition("/")
        if not number.isdigit():
            raise Refusal(f"{execution_id!r} is not an execution id", code="unknown_execution")
        return self._work(work_id), int(number)

    # -- Work and input ----------------------------------------------------------------

    def submit(
        self,
        work_id: str,
        *,
        binding: str,
        scope: str = "root",
        kind: str = "run-once",
        trigger: str = "all",
        safety: str = "undeclared",
        inputs: Sequence[tuple[Any, str | None, str | None]] = (),
    ) -> AppendResult:
        """Define a Work (idempotently) and accept inputs `(payload, key, correlation)`."""
        spec = {
            "scope": scope,
            "binding": binding,
            "kind": kind,
            "trigger": trigger,
            "safety": safety,
        }

        def decide() -> tuple[list[Emit], dict[str, int]]:
            return self._submit_one(work_id, spec, inputs, self.now())

        return self.transact(decide)

    def _submit_one(
        self,
        work_id: str,
        spec: dict[str, Any],
        inputs: Sequence[tuple[Any, str | None, str | None]],
        now: datetime,
    ) -> tuple[list[Emit], dict[str, int]]:
        existing = self.projection.works.get(work_id)
        emits = lifecycle.submit(existing, work_id=work_id, **spec)
        state = existing
        if state is None:
            state = WorkState(work_id=work_id, version=0, submitted_at=now, **spec)
        for payload, key, correlation in inputs:
            try:
                emit = lifecycle.accept_input(
                    state, work_id=work_id, payload=payload, key=key, correlation_key=correlation
                )
            except Refusal as refusal:
                # A caller retrying a submit whose input was accepted (and maybe already run)
                # gets a no-op, not an error: the input's delivery identity is in the log.
                if refusal.code == "work_terminal" and self._accepted(work_id, payload, key):
                    continue
                raise
            emits.append(emit)
        expected = {} if existing is not None else {work_stream(work_id): 0}
        return emits, expected

    def _accepted(self, work_id: str, payload: Any, key: str | None) -> bool:
        key = key if key is not None else lifecycle.derived_input_key(payload)
        return self.store.find_delivery(f"input/{work_id}/{key}") is not None

    def submit_many(self, works: Sequence[dict[str, Any]]) -> AppendResult:
        """Submit several Works with one input each, in one append (bulk loading).

        Each item: `work_id`, `binding`, optional `scope`, `kind`, `input`, `key`.
        """

        def decide() -> tuple[list[Emit], dict[str, int]]:
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            now = self.now()
            for item in works:
                spec = {
                    "scope": item.get("scope", "root"),
                    "binding": item["binding"],
                    "kind": item.get("kind", "run-once"),
                    "trigger": "all",
                    "safety": "undeclared",
                }
                inputs = [(item.get("input"), item.get("key"), None)]
                more, fences = self._submit_one(item["work_id"], spec, inputs, now)
                emits.extend(more)
                expected.update(fences)
            return emits, expected

        return self.transact(decide)

    def accept(
        self,
        work_id: str,
        payload: Any = None,
        *,
        key: str | None = None,
        correlation_key: str | None = None,
    ) -> RecordedEvent:
        def decide() -> tuple[list[Emit], dict[str, int]]:
            emit = lifecycle.accept_input(
                self.projection.works.get(work_id),
                work_id=work_id,
                payload=payload,
                key=key,
                correlation_key=correlation_key,
            )
            return [emit], {}

        return self.transact(decide).recorded[0]

    # -- start ----------------------------------------------------------------------------

    def start_pass(
        self,
        limit: int = 256,
        *,
        gated: bool = False,
        gates: dict[str, GateDecision] | None = None,
    ) -> StartPass:
        """Admit ready Work (capacity, scope limits, gates, budgets) and claim it in one
        append; see `rota.domain.admission`. `gated`: start gates are registered, and
        `gates` holds their answers for the Work they were asked about."""
        waiting: list[Waiting] = []
        asks: list[str] = []

        def decide() -> tuple[list[Emit], dict[str, int]]:
            projection = self.projection
            limits = self.settings.scope_limits
            plan = admission.plan_starts(
                projection.ready_order(limit),
                now=self.now(),
                owner=self.owner,
                settings=self.settings,
                pin=lambda work: self.pinned_for(work.binding),
                pool_in_use={pool: len(h) for pool, h in projection.slots.items()},
                scope_in_use=projection.scope_in_use(limits) if limits else {},
                budgets=projection.budgets,
                used=projection.used,
                notified=projection.notified,
                gated=gated,
                gates=gates,
                limit=limit,
            )
            waiting[:] = plan.waiting
            asks[:] = plan.asks
            expected: dict[str, int] = {}
            for emit in plan.emits:
                if emit.stream.startswith("work/"):
                    expected[emit.stream] = projection.works[emit.stream[5:]].version
            for fence in plan.fences:
                expected[fence] = self._fence_version(fence)
            return plan.emits, expected

        result = self.transact(decide)
        claimed: list[Claimed] = []
        for recorded in result.recorded:
            if recorded.type in ("core.execution.claimed", "core.execution.resumed"):
                work = self.projection.works[recorded.stream[5:]]
                assert work.current is not None
                resume = recorded.type == "core.execution.resumed"
                claimed.append(Claimed(work, work.current, resume))
        return StartPass(claimed, waiting, asks)

    def _fence_version(self, stream: str) -> int:
        projection = self.projection
        if stream.startswith("pool/"):
            return projection.pool_versions.get(stream[5:], 0)
        if stream.startswith("scope/"):
            return projection.scope_versions.get(stream[6:], 0)
        if stream == admission.LEDGERS:
            return projection.ledger_version
        raise ValueError(f"no fence for stream {stream!r}")

    def _pin_for_start(self, work: WorkState) -> Pinned:
        current = work.current
        if current is not None and current.status == "parked":
            return current.pinned
        return self.pinned_for(work.binding)

    # -- fenced writes on behalf of an attempt ---------------------------------------------

    def _fenced(
        self, execution_id: str, decide: Callable[[WorkState, int, datetime], list[Emit]]
    ) -> AppendResult:
        def outer() -> tuple[list[Emit], dict[str, int]]:
            work, number = self._execution(execution_id)
            emits = decide(work, number, self.now())
            return emits, {work_stream(work.work_id): work.version}

        return self.transact(outer)

    def _fenced_many(
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
                    work, number = self._execution(execution_id)
                    emits.extend(decide(work, number, epoch, now, index))
                    expected[work_stream(work.work_id)] = work.version
                except Refusal as refusal:
                    refused[execution_id] = refusal
            return emits, expected

        self.transact(outer)
        return refused

    def invoke(self, execution_id: str, epoch: int, isolated: bool = False) -> None:
        self._fenced(execution_id, lambda w, n, now: [lifecycle.invoke(w, n, epoch, now, isolated)])

    def invoke_many(
        self, items: Sequence[tuple[str, int]], isolated: Sequence[bool] = ()
    ) -> dict[str, Refusal]:
        """Invoke markers for several attempts in one append (`isolated` per item)."""
        flags = list(isolated) or [False] * len(items)
        return self._fenced_many(
            items,
            lambda w, n, epoch, now, index: [lifecycle.invoke(w, n, epoch, now, flags[index])],
        )

    def phase(self, execution_id: str, epoch: int, name: str, outcome: str | None) -> None:
        def decide(work: WorkState, number: int, now: datetime) -> list[Emit]:
            if outcome is None:
                return [lifecycle.begin_phase(work, number, epoch, now, name)]
            return [lifecycle.end_phase(work, number, epoch, now, name, outcome)]  # type: ignore[arg-type]

        self._fenced(execution_id, decide)

    def persist_recovery(self, execution_id: str, epoch: int, metadata: Any) -> None:
        self._fenced(
            execution_id,
            lambda w, n, now: [lifecycle.persist_recovery(w, n, epoch, now, metadata)],
        )

    def renew(self, execution_id: str, epoch: int) -> datetime:
        self._fenced(execution_id, lambda w, n, now: [lifecycle.renew(w, n, epoch, now)])
        work, number = self._execution(execution_id)
        return work.attempts[number - 1].lease_expires_at

    def renew_many(self, items: Sequence[tuple[str, int]]) -> dict[str, Refusal]:
        return self._fenced_many(
            items, lambda w, n, epoch, now, _: [lifecycle.renew(w, n, epoch, now)]
        )

    def release(self, execution_id: str, epoch: int, reason: str = "released") -> None:
        self._fenced(execution_id, lambda w, n, now: [lifecycle.release(w, n, epoch, now, reason)])

    def finish(self, execution_id: str, epoch: int, result: Result) -> AppendResult:
        return self._fenced(
            execution_id, lambda w, n, now: lifecycle.finish(w, n, epoch, now, result)
        )

    def finish_many(self, items: Sequence[tuple[str, int, Result]]) -> dict[str, Refusal]:
        """Store several results in one append; returns the refusals by execution id."""
        pairs = [(execution_id, epoch) for execution_id, epoch, _ in items]
        return self._fenced_many(
            pairs,
            lambda w, n, epoch, now, index: lifecycle.finish(w, n, epoch, now, items[index][2]),
        )

    def time_out(self, execution_id: str, epoch: int) -> AppendResult:
        return self._fenced(execution_id, lambda w, n, now: lifecycle.time_out(w, n, epoch, now))

    def confirm_stopped(self, execution_id: str, expected_epoch: int) -> AppendResult:
        def decide() -> tuple[list[Emit], dict[str, int]]:
            work, number = self._execution(execution_id)
            emits = lifecycle.confirm_stopped(work, number, expected_epoch)
            return emits, {work_stream(work.work_id): work.version}

        return self.transact(decide)

    def request_retry(
        self,
        work_id: str,
        *,
        alias: str = "core.manual.retry",
        requested_by: str = "operator",
        reason: str = "",
    ) -> AppendResult:
        """A manual retry of the Work's current failure; idempotent per failure."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.projection.works.get(work_id)
            try:
                emit = lifecycle.request_retry(
                    work, work_id=work_id, alias=alias, requested_by=requested_by, reason=reason
                )
            except Refusal as refusal:
                # A caller repeating a request that was already applied gets its answer.
                if refusal.code == "nothing_to_retry" and work is not None:
                    boundary = work.retry.failed_at
                    if self.store.find_delivery(f"retry-request/{work_id}/{boundary}"):
                        return [], {}
                raise
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        return self.transact(decide)

    def fire_due_timers(self) -> int:
        """Fire every retry timer due by the store's clock; returns how many fired."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            now = self.now()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for work_id, due in list(self.projection.timers.items()):
                if due <= now:
                    work = self.projection.works[work_id]
                    emits.append(lifecycle.fire_retry(work, now))
                    expected[work_stream(work_id)] = work.version
            return emits, expected

        return self.transact(decide).written
