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

from rota.domain import admission, budgets, control, gates, lifecycle, recovery
from rota.domain.admission import GateDecision, Waiting
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import NotEligible, Refusal
from rota.domain.events import BudgetCharged, BudgetsConfigured
from rota.domain.events.admission import Budget
from rota.domain.policy import Binding, Pinned, Registration, Settings
from rota.domain.results import Result
from rota.domain.state import AttemptState, Control, WorkState
from rota.projections.scheduler import SchedulerProjection

from .clock import parse_timestamp
from .errors import ConcurrencyConflict, StoreUnavailable
from .store import AppendResult, EventStore, NewEvent, RecordedEvent

log = logging.getLogger("rota.scheduler")
MAX_CONFLICT_RETRIES = 16
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


class Recovered(msgspec.Struct, frozen=True):
    """An attempt this pass recovered: relaunch it, adopt it, or stop it (timed out)."""

    work: WorkState
    attempt: AttemptState
    mode: str
    timed_out: bool
    previous_owner: str


class Dispatch(msgspec.Struct, frozen=True):
    """A control claimed for delivery: perform it, then answer with the same token."""

    work_id: str
    attempt: AttemptState
    control: Control
    token: str
    epoch: int
    payload: Any


class RecoveryPass(msgspec.Struct):
    recovered: list[Recovered]
    held: list[str]
    unsupported: list[str]
    has_more: bool


def config_generation(bindings: dict[str, Binding], registrations: dict[str, Registration]) -> str:
    """A content hash of the bindings and registrations: stable across restarts."""
    blob = msgspec.json.encode(
        [sorted(bindings.items()), sorted(registrations.items())], order="sorted"
    )
    return hashlib.sha256(blob).hexdigest()[:12]


class SchedulerService:
    """Commands of the lifecycle over one store, with one in-memory scheduler projection."""

    def __init__(
        self,
        store: EventStore,
        *,
        settings: Settings,
        owner: str,
        bindings: dict[str, Binding] | None = None,
        registrations: dict[str, Registration] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.owner = owner
        self.bindings: dict[str, Binding] = dict(bindings or {})
        self.registrations: dict[str, Registration] = dict(registrations or {})
        self.projection = SchedulerProjection()
        self.lock = threading.RLock()
        self.conflicts = 0
        self._generation: str | None = None
        self._pinned: dict[str, Pinned] = {}

    # -- configuration --------------------------------------------------------------

    @property
    def generation(self) -> str:
        if self._generation is None:
            self._generation = config_generation(self.bindings, self.registrations)
        return self._generation

    def set_binding(self, binding: Binding) -> None:
        """Define or redefine a binding: a new configuration generation."""
        with self.lock:
            self.bindings[binding.name] = binding
            self._configured()

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
            while True:
                batch = self.store.read(self.projection.position, 5000)
                if not batch:
                    return applied
                self._apply(batch)
                applied += len(batch)

    def _apply(self, recorded: Sequence[RecordedEvent]) -> None:
        projection = self.projection
        parsed: dict[str, datetime] = {}
        for r in recorded:
            at = parsed.get(r.recorded_at)
            if at is None:
                at = parsed[r.recorded_at] = parse_timestamp(r.recorded_at)
            projection.apply(r.position, r.stream, r.version, at, r.event)

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

    # -- recovery ------------------------------------------------------------------------

    def recovery_pass(
        self,
        limit: int = recovery.DEFAULT_PAGE,
        supported: Callable[[AttemptState], bool] = lambda attempt: True,
    ) -> RecoveryPass:
        """Recover one page of attempts whose lease expired or was released, in one append.

        `supported(attempt)` says whether this host has the attempt's pinned executor; an
        unsupported attempt is left alone (never given to a replacement executor).
        """
        held: list[str] = []
        unsupported: list[str] = []
        more = [False]

        def decide() -> tuple[list[Emit], dict[str, int]]:
            held.clear()
            unsupported.clear()
            now = self.now()
            live = [self.projection.works[w] for w in set(self.projection.live.values())]
            due, more[0] = recovery.page(live, now, limit)
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for work in due:
                assert work.current is not None
                if not supported(work.current):
                    unsupported.append(work.current.execution_id)
                    continue
                found = recovery.recover(
                    work,
                    now=now,
                    owner=self.owner,
                    crash_loop_limit=self.settings.crash_loop_limit,
                )
                if found and found[0].event.tag() == "core.work.held":
                    held.append(work.work_id)
                emits.extend(found)
                if found:
                    expected[work_stream(work.work_id)] = work.version
            return emits, expected

        result = self.transact(decide)
        recovered: list[Recovered] = []
        for recorded in result.recorded:
            event = recorded.event
            if recorded.type == "core.execution.recovered":
                work = self.projection.works[recorded.stream[5:]]
                assert work.current is not None
                timed_out = getattr(event, "reason", "") == "timeout"
                mode = getattr(event, "mode", "adopt")
                previous = getattr(event, "previous_owner", "")
                recovered.append(Recovered(work, work.current, mode, timed_out, previous))
        return RecoveryPass(recovered, held, unsupported, more[0])

    def lose(self, execution_id: str, epoch: int, evidence: str = "not_running") -> AppendResult:
        """Trusted not-running evidence and no result: the attempt is lost."""
        return self._fenced(
            execution_id, lambda w, n, now: recovery.lose(w, n, epoch, now, evidence)
        )

    def adopted(self, execution_id: str, epoch: int) -> None:
        """The executor attached to the recovered attempt: record it (fenced)."""
        self._fenced(execution_id, lambda w, n, now: [recovery.adopted(w, n, epoch, now)])

    def adoptable(self, execution_id: str, epoch: int) -> bool:
        with self.lock:
            self.catch_up()
            work_id, _, number = execution_id.rpartition("/")
            work = self.projection.works.get(work_id)
            return number.isdigit() and recovery.adoptable(work, int(number), epoch)

    def release_hold(
        self, work_id: str, kind: str | None = None, by: str = "operator"
    ) -> AppendResult:
        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.projection.works.get(work_id)
            emit = recovery.release_hold(work, work_id=work_id, kind=kind, by=by)
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        return self.transact(decide)

    # -- budgets, gates, cancellation ----------------------------------------------------

    def configure_budgets(self, configured: Sequence[Budget]) -> bool:
        """Record the budgets in force when they differ from the log's; True if recorded."""
        wanted = tuple(configured)
        budgets.validate(wanted)

        def decide() -> tuple[list[Emit], dict[str, int]]:
            if self.projection.budgets == wanted:
                return [], {}
            event = BudgetsConfigured(budgets=list(wanted))
            return [Emit(admission.LEDGERS, event)], {
                admission.LEDGERS: self.projection.ledger_version
            }

        return self.transact(decide).written > 0

    def settle_pass(self, limit: int = 512) -> int:
        """Charge staged usage to the ledgers (each outcome once); returns how many."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            projection = self.projection
            if not projection.staged or not projection.budgets:
                return [], {}
            emits: list[Emit] = []
            charged: dict[tuple[str, str, str], float] = {}
            sent = set(projection.notified)

            def used(budget: str, ledger: str, window: str) -> float:
                return projection.used(budget, ledger, window) + charged.get(
                    (budget, ledger, window), 0.0
                )

            for source in sorted(projection.staged)[:limit]:
                work_id, execution, usage, at = projection.staged[source]
                scope = projection.works[work_id].scope
                charges = budgets.charges_for(projection.budgets, work_id, scope, at, usage)
                for n in budgets.notices(projection.budgets, charges, work_id, scope, used):
                    if n.delivery_id not in sent:
                        sent.add(n.delivery_id or "")
                        emits.append(n)
                for c in charges:
                    key = (c.budget, c.ledger, c.window)
                    charged[key] = charged.get(key, 0.0) + c.amount
                event = BudgetCharged(
                    work_id=work_id, execution=execution, source=source, charges=charges
                )
                emits.append(Emit(admission.LEDGERS, event, f"charge/usage/{source}"))
            return emits, {admission.LEDGERS: projection.ledger_version}

        return self.transact(decide).written

    def settle_gate(
        self, work_id: str, registration: str, *, admit: bool, reason: str = ""
    ) -> AppendResult:
        """The holding gate admits (release, one pass) or refuses (cancels) the Work."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.projection.works.get(work_id)
            decision = "released" if admit else "refused"
            identity = f"gate/{work_id}/{registration}/{decision}"
            holding = work is not None and any(
                h.kind == "gate" and h.holder == registration for h in work.holds
            )
            if not holding and self.store.find_delivery(identity) is not None:
                return [], {}  # settled before: idempotent per key
            emit = gates.settle(
                work, work_id=work_id, registration=registration, admit=admit, reason=reason
            )
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        return self.transact(decide)

    def cancel(self, work_id: str, *, reason: str = "", by: str = "operator") -> AppendResult:
        """Cancel a Work: fences its attempt, waits, timers and input at once."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.projection.works.get(work_id)
            emit = gates.cancel(work, work_id=work_id, reason=reason, by=by)
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        return self.transact(decide)

    # -- control dispatch ------------------------------------------------------------------

    def inject(
        self, work_id: str, payload: Any, *, key: str | None = None, by: str = "operator"
    ) -> AppendResult:
        """Accept input and ask the running attempt to take it now (a durable intent)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.projection.works.get(work_id)
            emits = control.request_inject(
                work, work_id=work_id, payload=payload, key=key, requested_by=by
            )
            assert work is not None
            return emits, {work_stream(work_id): work.version}

        return self.transact(decide)

    def interrupt(self, work_id: str, *, by: str = "operator") -> AppendResult:
        """Fence the running attempt, leave the Work ready, then send the interrupt."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.projection.works.get(work_id)
            emits = control.request_interrupt(work, work_id=work_id, requested_by=by)
            assert work is not None
            return emits, {work_stream(work_id): work.version}

        return self.transact(decide)

    def dispatch_pass(self, limit: int = 64) -> list[Dispatch]:
        """Claim every dispatchable control intent (one append, a fresh token each)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for work_id in list(self.projection.live.values()) + list(self._interrupting()):
                work = self.projection.works[work_id]
                for item in work.controls:
                    if len(emits) < limit and control.dispatchable(work, item):
                        emits.append(control.dispatch(work, item.intent))
                        expected[work_stream(work_id)] = work.version
            return emits, expected

        dispatches: list[Dispatch] = []
        for recorded in self.transact(decide).recorded:
            event = recorded.event
            work = self.projection.works[recorded.stream[5:]]
            item = next(c for c in work.controls if c.intent == event.intent)  # type: ignore[attr-defined]
            attempt = work.attempts[item.attempt - 1]
            payload = next(
                (p.payload for p in work.pending if p.position == item.input_position), None
            )
            dispatches.append(
                Dispatch(work.work_id, attempt, item, event.token, event.epoch, payload)  # type: ignore[attr-defined]
            )
        return dispatches

    def _interrupting(self) -> set[str]:
        """Work whose fenced (interrupted) attempt still holds a slot and awaits its control."""
        found: set[str] = set()
        for holders in self.projection.slots.values():
            for execution in holders:
                located = self.projection.attempt(execution)
                if located is None:
                    continue
                work = located[0]
                if any(c.kind == "interrupt" and c.state == "pending" for c in work.controls):
                    found.add(work.work_id)
        return found

    def answer_control(self, work_id: str, intent: str, token: str, outcome: str) -> None:
        """Acknowledge (`ack`) or settle a dispatch, only under its same live token."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self._work(work_id)
            if outcome == "ack":
                emit = control.acknowledge(work, intent, token)
            else:
                emit = control.settle(work, intent, token, outcome)
            return [emit], {work_stream(work_id): work.version}

        self.transact(decide)
