"""The checker: folds the log event by event and asks every named invariant about each one.

`Checker.observe` takes the events in position order (with their stored rows, for the
hash chain) and returns the violations each reveals; `at_rest` asks what must hold once
the simulation is quiescent. Each invariant is judged against the model as it stood
before the event, then the model folds it. Dispatch is by event type, resolved once per
type, so an event costs only the invariants that read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from rota.application.ports import EventStore, RawRecord, RecordedEvent
from rota.domain.policy import Settings
from rota.testing.sim.invariants.attempts import (
    FencedWriteWhileLive,
    LeaseNeverShortened,
    NoInputAfterTerminal,
    NoStaleEpochWrite,
    NoStartAfterTerminal,
    NoStartWhileHeld,
    OneLiveAttempt,
    RelaunchOnlyWhenNothingStarted,
)
from rota.testing.sim.invariants.base import Invariant, Violation, summary
from rota.testing.sim.invariants.capacity import CapacityRespected, SlotFreedAfterStop
from rota.testing.sim.invariants.coalescing import NoSubmitLostByDebounce
from rota.testing.sim.invariants.flow import BucketEqualsItsFold, KeyLimitNeverExceeded
from rota.testing.sim.invariants.ledger import BudgetHeldAtMax, BudgetLedgerBalanced, Key
from rota.testing.sim.invariants.log import (
    ChainVerifies,
    DeliveryIdentityUnique,
    LogInvariant,
    LogSequence,
)
from rota.testing.sim.invariants.model import Model
from rota.testing.sim.invariants.passes import (
    FairShareOrder,
    NoHeadOfLineBlocking,
    PassRecord,
    StarvationBound,
)
from rota.testing.sim.invariants.retries import (
    BackoffRespected,
    LostRetriedOnlyIfIdempotent,
    RetryTimerFiredOnce,
)
from rota.testing.sim.invariants.schedules import (
    CatchupAllKeepsEvery,
    ScheduleFiredOnce,
    SchedulePastResolved,
)

# Every invariant class, in the order they are asked (and listed).
ALL: tuple[type[Invariant], ...] = (
    OneLiveAttempt,
    NoStaleEpochWrite,
    FencedWriteWhileLive,
    CapacityRespected,
    SlotFreedAfterStop,
    RelaunchOnlyWhenNothingStarted,
    LeaseNeverShortened,
    RetryTimerFiredOnce,
    BackoffRespected,
    LostRetriedOnlyIfIdempotent,
    NoStartAfterTerminal,
    NoInputAfterTerminal,
    NoStartWhileHeld,
    ScheduleFiredOnce,
    SchedulePastResolved,
    CatchupAllKeepsEvery,
    BudgetLedgerBalanced,
    BudgetHeldAtMax,
    KeyLimitNeverExceeded,
    BucketEqualsItsFold,
    NoHeadOfLineBlocking,
    StarvationBound,
    FairShareOrder,
    NoSubmitLostByDebounce,
    DeliveryIdentityUnique,
    LogSequence,
    ChainVerifies,
)
INVARIANTS: dict[str, str] = {cls.name: summary(cls) for cls in ALL}

Observed = RecordedEvent | tuple[RecordedEvent, RawRecord | None]


class Checker:
    """Checks every named invariant after every event (see the module docstring).

    `settings`: the limits `capacity_respected` checks (None: capacity is not checked, the
    limits being unknown). `chain`: verify the hash chain when rows are given.
    """

    def __init__(self, settings: Settings | None = None, *, chain: bool = True) -> None:
        self.settings = settings
        self.model = Model(settings.scope_limits if settings is not None else None)
        self.checked = 0
        fired_once = ScheduleFiredOnce()
        self.ledger = BudgetLedgerBalanced()
        self.buckets = BucketEqualsItsFold()
        self.passes = (NoHeadOfLineBlocking(), StarvationBound(), FairShareOrder())
        built: list[Invariant] = [
            OneLiveAttempt(),
            NoStaleEpochWrite(),
            FencedWriteWhileLive(),
            *([CapacityRespected(settings)] if settings is not None else []),
            SlotFreedAfterStop(),
            RelaunchOnlyWhenNothingStarted(),
            LeaseNeverShortened(),
            RetryTimerFiredOnce(),
            BackoffRespected(),
            LostRetriedOnlyIfIdempotent(),
            NoStartAfterTerminal(),
            NoInputAfterTerminal(),
            NoStartWhileHeld(),
            fired_once,
            SchedulePastResolved(fired_once),
            CatchupAllKeepsEvery(),
            self.ledger,
            BudgetHeldAtMax(self.ledger),
            KeyLimitNeverExceeded(),
            self.buckets,
            *self.passes,
            NoSubmitLostByDebounce(),
            DeliveryIdentityUnique(),
            LogSequence(),
            *([ChainVerifies()] if chain else []),
        ]
        self.invariants = tuple(built)
        self.names: tuple[str, ...] = tuple(i.name for i in built)
        self._rows = tuple(i for i in built if isinstance(i, LogInvariant))
        self._by_type: dict[type, tuple[Invariant, ...]] = {}

    def observe(self, recorded: RecordedEvent, raw: RawRecord | None = None) -> list[Violation]:
        """Fold one event (in position order) and return the violations it reveals."""
        kind = type(recorded.event)
        asked = self._by_type.get(kind)
        if asked is None:
            asked = self._by_type[kind] = tuple(
                i
                for i in self.invariants
                if not isinstance(i, LogInvariant) and i.events and issubclass(kind, i.events)
            )
        found: list[Violation] = []
        for invariant in asked:
            found.extend(invariant.observe(recorded, self.model))
        for row in self._rows:
            found.extend(row.observe_row(recorded, raw))
        self.model.apply(recorded)
        self.checked += 1
        return found

    def observe_all(self, events: Iterable[Observed]) -> list[Violation]:
        """`observe` each of `events` (events, or (event, row) pairs), in order."""
        found: list[Violation] = []
        for item in events:
            if isinstance(item, tuple):
                found.extend(self.observe(*item))
            else:
                found.extend(self.observe(item))
        return found

    def at_rest(self, now: datetime) -> list[Violation]:
        """What must hold when the simulation is quiescent at `now` (every pass ran and
        appended nothing more): schedules' due times answered, staged usage charged."""
        found: list[Violation] = []
        for invariant in self.invariants:
            found.extend(invariant.at_rest(now, self.model))
        return found

    def observe_pass(self, record: PassRecord) -> list[Violation]:
        """The violations of one start pass the engine decided (`invariants.passes`)."""
        found: list[Violation] = []
        for invariant in self.passes:
            found.extend(invariant.observe_pass(record))
        return found

    def compare_buckets(self, buckets: dict[str, int], position: int) -> list[Violation]:
        """`bucket_equals_its_fold` violations where a projection's buckets differ."""
        return self.buckets.compare(buckets, position)

    def ledgers(self) -> dict[Key, float]:
        """Each budget ledger's total as the charges in the log sum it."""
        return self.ledger.ledgers()

    def compare_ledgers(self, ledgers: dict[Key, float], position: int) -> list[Violation]:
        """`budget_ledger_balanced` violations where a projection's ledgers differ."""
        return self.ledger.compare(ledgers, position)


def store_records(
    store: EventStore, *, after: int = 0, page: int = 5000
) -> Iterator[tuple[RecordedEvent, RawRecord]]:
    """Every event of `store` after `after` with its stored row, in position order."""
    position = after
    while True:
        events = store.read(position, page)
        if not events:
            return
        rows = {r.position: r for r in store.read_raw(position, len(events))}
        for event in events:
            row = rows.get(event.position)
            if row is None:
                raise LookupError(f"no stored row at position {event.position}")
            yield event, row
        position = events[-1].position


def check_store(
    store: EventStore, settings: Settings | None = None, *, now: datetime | None = None
) -> list[Violation]:
    """Check a whole store's log (and, given `now`, what must hold at rest)."""
    checker = Checker(settings)
    found = checker.observe_all(store_records(store))
    if now is not None:
        found.extend(checker.at_rest(now))
    return found
