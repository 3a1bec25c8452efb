"""The scheduler projection: every Work's state, what is ready, what holds a slot, timers.

A deterministic fold of the log: `apply()` takes each event in position order and updates
the Works (`rota.domain.evolve`) and the indices the cadence needs (startable Works, slot
holders, live leases, due timers, pool versions). It reads time only from events and never
appends: a projection rebuilt from position 0 equals the live one (`digest()` says so).

Persistence hooks (projection stores; rows in `scheduler_rows`): `apply` records the keys
of the rows it changed in `dirty` (a save writes only those); `from_rows` rebuilds the
object, deriving every index with the fold's own `_index`; neither is part of `digest()`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from rota.domain.budgets import notice_identity
from rota.domain.events import (
    BudgetCharged,
    BudgetExceeded,
    BudgetsConfigured,
    BudgetWarning,
    CapacityClaimed,
    Event,
    FlowConfigured,
    LeaseRenewed,
)
from rota.domain.events.admission import Budget
from rota.domain.events.execution import AttemptClaimed, _Outcome
from rota.domain.evolve import evolve, renew
from rota.domain.flow import Fairness, FlowRules
from rota.domain.flow_checks import FlowView
from rota.domain.retention import summarize_works
from rota.domain.state import AttemptState, WorkState
from rota.projections import flow_index as fx
from rota.projections.held_works import OnDemandWorks, is_quiet
from rota.projections.scheduler_rows import (
    ACTIVE_ROW,
    NOTIFIED_ROW,
    SINGLETONS,
    WORK_ROW,
    decode_rows,
    encode_row,
    ledger_row,
    persisted_keys,
)
from rota.projections.work_rows import WorkCodec, canonical_encoder


class SchedulerProjection:
    """In-memory fold of the log; not thread-safe (the service serializes access)."""

    name = "scheduler"
    # 2: the `active` row; 3: lean Work rows and `binding/` rows (`work_rows`); 4: flow
    # control (`flow`, `fair` rows); 5: a Work's flow fields as one `WorkFlow`
    version = 5
    # Told of every change the fold makes to a Work (the Work before, None for a new one,
    # and after): a `WorkTally` follows them. Not part of the state, rows or digest.
    watch: Callable[[WorkState | None, WorkState], None] | None = None

    def __init__(self) -> None:
        self.position = 0
        self.works: dict[str, WorkState] = {}
        self.startable: set[str] = set()
        self.scoped: FlowRules | None = None  # the rules, while they weigh scopes
        self._ready = fx.ReadyGroups(self._ready_work)
        self.slots: dict[str, set[str]] = {}
        self.live: dict[str, str] = {}
        self.timers: dict[str, datetime] = {}
        self.pool_versions: dict[str, int] = {}
        self.turns = 0
        # Which scope each slot holder's Work is in (scope limits count every pool).
        self.slot_scopes: dict[str, str] = {}
        self.scope_versions: dict[str, int] = {}
        # Budgets in force, ledger totals, usage staged but not yet charged, notices sent.
        self.budgets: tuple[Budget, ...] = ()
        self.ledgers: dict[tuple[str, str, str], float] = {}
        self.staged: dict[int, tuple[str, str, dict[str, float], datetime]] = {}
        self.notified: set[str] = set()
        self.ledger_version = 0
        # Flow control (rules, buckets, fences, pauses), fair share, key slots (`flow_index`).
        self.flow = fx.FlowState()
        self.fair = Fairness()
        self.key_slots: dict[str, set[str]] = {}
        self._rules: tuple[object, FlowRules] = (None, FlowRules())
        # Persisted row keys changed since the last save (not part of the state or digest).
        self.dirty: set[str] = set()
        self.codec = WorkCodec()  # the Work rows' encoding (bindings stored once)
        self._unsettled = False

    def apply(self, position: int, stream: str, version: int, at: datetime, event: Event) -> None:
        if position <= self.position:
            return
        if stream.startswith("work/"):
            work_id = stream[5:]
            # A held Work by a plain dict lookup; else looked up before the position moves:
            # a quiet Work read on demand is folded up to the position before this event
            # (`OnDemandWorks`). The first event of a stream has no Work before it.
            works = self.works
            before = dict.get(works, work_id)
            if before is None and version != 1:
                before = works.get(work_id)
            self.position = position
            after = evolve(before, event, position, at)
            if after is None:
                return
            self.works[work_id] = after
            if self.watch is not None:
                self.watch(before, after)
            dirty = self.dirty
            dirty.add(stream)
            dirty.add(ACTIVE_ROW)
            self._index(before, after)
            if self.budgets and isinstance(event, _Outcome) and event.usage:
                self._stage(work_id, position, at, event)
            elif (after.flow or self.fair.finish or self.scoped) and type(event) is AttemptClaimed:
                fx.fold_claim(self.fair, self, after, event)  # (else one group: no tags)
                dirty.add("fair")
        else:
            self.position = position
            self._apply_other(stream, version, event)

    def fold_page(self, records: Sequence[Any], times: Sequence[datetime], stop: int) -> None:
        """Apply a page of recorded events (position order, each with its parsed recorded
        time) up to position `stop`, as `apply` would, but without keeping the indices: a
        bulk fold from the log derives them once at the end (`settle()`), which leaves the
        same projection (the indices are a function of the Works; `restore` relies on it)."""
        works, dirty, last, held = self.works, self.dirty, self.position, dict.get
        watch = self.watch
        # Lease renewals only move the current attempt's lease and the Work's version: a run
        # is folded as one (`renew`) before the Work's next other event and the page's end.
        renewals: dict[str, tuple[int, datetime]] = {}
        for record, at in zip(records, times, strict=True):
            position = record.position
            if position > stop:
                break
            if position <= last:
                continue
            self.position = last = position
            stream, event = record.stream, record.event
            if stream.startswith("work/"):
                work_id = stream[5:]
                if type(event) is LeaseRenewed:
                    if work_id in works:  # else no Work to renew: evolve would ignore it
                        count = renewals[work_id][0] + 1 if work_id in renewals else 1
                        renewals[work_id] = (count, event.lease_expires_at)
                        dirty.add(stream)
                    continue
                if work_id in renewals:
                    count, expiry = renewals.pop(work_id)
                    works[work_id] = renew(works[work_id], expiry, count)
                # A held Work by a plain dict lookup; `works.get` (found on demand) on a miss,
                # but for a stream's first event, which has no Work before it (`apply`).
                before = held(works, work_id)
                if before is None and record.version != 1:
                    before = works.get(work_id)
                after = evolve(before, event, position, at)
                if after is None:
                    continue
                works[work_id] = after
                if watch is not None:
                    watch(before, after)
                dirty.add(stream)
                if self.budgets and isinstance(event, _Outcome) and event.usage:
                    self._stage(work_id, position, at, event)
                elif (after.flow or self.fair.finish or self.scoped) and type(
                    event
                ) is AttemptClaimed:
                    fx.fold_claim(self.fair, self, after, event)
                    dirty.add("fair")
            else:
                self._apply_other(stream, record.version, event)
        for work_id, (count, expiry) in renewals.items():
            works[work_id] = renew(works[work_id], expiry, count)
        self.dirty.add(ACTIVE_ROW)
        self._unsettled = True

    def settle(self) -> None:
        """Derive the indices after `fold_page` (a no-op when they are current)."""
        if self._unsettled:
            self._reindex()

    def _reindex(self) -> None:
        self.scoped = self.rules if self.rules.scopes else None
        self._ready = fx.ReadyGroups(self._ready_work, self.scoped)
        self.startable, self.slots, self.live, self.timers = set(), {}, {}, {}
        self.slot_scopes, self.key_slots = {}, {}
        works = self.works
        # Quiet Works not in memory name no index, so the indices come from those held.
        for work in works.in_memory() if isinstance(works, OnDemandWorks) else works.values():
            self._index(None, work)
        # The live fold keeps a pool's slot set once a slot was taken in it (every such pool
        # had a capacity claim, so `pool_versions` names it).
        for pool in self.pool_versions:
            self.slots.setdefault(pool, set())
        self._unsettled = False

    def _stage(self, work_id: str, position: int, at: datetime, event: _Outcome) -> None:
        execution = f"{work_id}/{event.attempt}"
        self.staged[position] = (work_id, execution, dict(event.usage), at)
        self.dirty.add("staged")

    def _apply_other(self, stream: str, version: int, event: Event) -> None:
        """An event outside the Works' streams: pools, turns, scopes, budgets, flow."""
        if fx.apply_flow(self.flow, stream, version, event):
            self.dirty.add("flow")
            if type(event) is FlowConfigured and (event.scopes or self.scoped):
                self._reindex()  # (a Work without keys is in its scope's flow, or leaves it)
        elif stream.startswith("pool/"):
            if isinstance(event, CapacityClaimed):
                self.pool_versions[event.pool] = version
                self.dirty.add("pool_versions")
        elif stream.startswith("turns/"):
            self.turns += 1
            self.dirty.add("turns")
        elif stream.startswith("scope/"):
            self.scope_versions[stream[6:]] = version
            self.dirty.add("scope_versions")
        elif stream == "budget/ledgers":
            self.ledger_version = version
            self.dirty.add("ledger_version")
            if isinstance(event, BudgetsConfigured):
                self.budgets = tuple(event.budgets)
                self.dirty.update(("budgets", "staged"))
                if not self.budgets:
                    self.staged.clear()
            elif isinstance(event, BudgetCharged):
                for charge in event.charges:
                    key = (charge.budget, charge.ledger, charge.window)
                    self.ledgers[key] = self.ledgers.get(key, 0.0) + charge.amount
                    self.dirty.add(ledger_row(key))
                self.staged.pop(event.source, None)
                self.dirty.add("staged")
        elif stream == "budget/notices" and isinstance(event, BudgetWarning | BudgetExceeded):
            self.notified.add(notice := notice_identity(event))
            self.dirty.add(NOTIFIED_ROW + notice)
        elif stream == "retention":  # a prune's Works lose their payloads (`domain.retention`)
            self.dirty.update(summarize_works(self.works, event))

    def _index(self, before: WorkState | None, after: WorkState) -> None:
        work_id = after.work_id
        if after.startable:
            if work_id in self.startable:  # (`before.startable`, as indexed)
                self._ready.index(before, after)
            else:
                self.startable.add(work_id)
                self._ready.index(None, after)
        else:
            self.startable.discard(work_id)
        due = after.retry.next_due
        if due is not None:
            self.timers[work_id] = due
        elif self.timers:
            self.timers.pop(work_id, None)
        old = before.attempts[-1] if before is not None and before.attempts else None
        current = after.attempts[-1] if after.attempts else None
        if old is not None:
            if (
                current is not None
                and current.number == old.number
                and current.status == old.status
                and current.stop_confirmed == old.stop_confirmed
                and current.pinned is old.pinned
                and before is not None
                and before.scope == after.scope
            ):
                return  # the same attempt in the same standing (a renewal, an invoke marker)
            old_id = f"{work_id}/{old.number}"
            holders = self.slots.get(old.pinned.registration.pool)
            if holders is not None:
                holders.discard(old_id)
            self.live.pop(old_id, None)
            self.slot_scopes.pop(old_id, None)
            for key in () if before is None or before.flow is None else before.flow.keys:
                holding = self.key_slots.get(key)
                if holding is not None:
                    holding.discard(old_id)
        if current is not None:
            live = current.status in ("starting", "running")
            if live or (current.status == "ended" and not current.stop_confirmed):
                execution_id = f"{work_id}/{current.number}"
                pool = current.pinned.registration.pool
                holders = self.slots.get(pool)
                if holders is None:
                    holders = self.slots[pool] = set()
                holders.add(execution_id)
                self.slot_scopes[execution_id] = after.scope
                for key in () if after.flow is None else after.flow.keys:
                    holding = self.key_slots.get(key)
                    if holding is None:
                        holding = self.key_slots[key] = set()
                    holding.add(execution_id)
                if live:
                    self.live[execution_id] = work_id

    # -- queries --------------------------------------------------------------------

    def in_use(self, pool: str) -> int:
        return len(self.slots.get(pool, ()))

    def scope_in_use(self, scopes: Iterable[str]) -> dict[str, int]:
        """Slot holders (every pool) under each scope, its descendants included."""
        counts = dict.fromkeys(scopes, 0)
        for scope in self.slot_scopes.values():
            for limited in counts:
                if scope == limited or scope.startswith(limited + "/"):
                    counts[limited] += 1
        return counts

    def used(self, budget: str, ledger: str, window: str) -> float:
        return self.ledgers.get((budget, ledger, window), 0.0)

    def ready_order(self, limit: int | None = None) -> list[WorkState]:
        """Startable Works by priority, then oldest pending input (at most `limit`)."""
        return self._ready.ordered(limit)

    def ready_groups(self) -> dict[fx.Group, Iterator[WorkState]]:
        """Startable Works by (-priority, flow), each oldest first, lazily (`ReadyGroups`)."""
        return self._ready.groups()

    @property
    def rules(self) -> FlowRules:
        """The flow rules in force (built once per `core.flow.configured`)."""
        if self._rules[0] is not self.flow.config:
            self._rules = (self.flow.config, FlowRules(self.flow.config))
        return self._rules[1]

    def flow_view(self) -> FlowView:
        """What admission needs of flow control (`rota.domain.flow_checks`)."""
        in_use = lambda key: len(self.key_slots.get(key, ()))  # noqa: E731
        return FlowView(self.rules, self.flow.buckets, in_use, self.fair, self.flow.paused)

    def _ready_work(self, entry: tuple[int, str]) -> WorkState | None:
        """The Work a ready-heap entry names if still startable there (stale: None, unread)."""
        position, work_id = entry
        if work_id not in self.startable:
            return None
        work = dict.get(self.works, work_id) or self.works.get(work_id)  # (startable: held)
        if work is None or not work.pending or work.pending[0].position != position:
            return None
        return work

    def attempt(self, execution_id: str) -> tuple[WorkState, AttemptState] | None:
        work_id, _, number = execution_id.rpartition("/")
        work = self.works.get(work_id)
        if work is None or not number.isdigit():
            return None
        index = int(number) - 1
        if index < 0 or index >= len(work.attempts):
            return None
        return work, work.attempts[index]

    def live_attempts(self) -> Iterable[tuple[WorkState, AttemptState]]:
        for work_id in list(self.live.values()):
            work = self.works[work_id]
            if work.current is not None:
                yield work, work.current

    def next_due(self) -> datetime | None:
        return min(self.timers.values()) if self.timers else None

    def digest(self) -> str:
        """A canonical SHA-256 of the whole state: equal states, equal digests."""
        works, encode = self.works, self.codec.encode
        return self.digest_of(encode(works[w]) for w in sorted(works))

    def digest_of(self, encoded_works: Iterable[bytes]) -> str:
        """`digest()` given every Work row (`codec.encode`: lean, in id order) from
        elsewhere: a fold whose Works are not all in memory (`rota.infrastructure.spill`)."""
        h = hashlib.sha256()
        update = h.update
        for encoded in encoded_works:
            update(b"%s\n" % encoded)  # one call a Work (a million of them, in a rebuild)
        h.update(canonical_encoder.encode(sorted(self.pool_versions.items())))
        h.update(canonical_encoder.encode(sorted(self.scope_versions.items())))
        h.update(canonical_encoder.encode(list(self.budgets)))
        h.update(canonical_encoder.encode(sorted(self.ledgers.items())))
        h.update(canonical_encoder.encode(sorted(self.staged)))
        h.update(canonical_encoder.encode(sorted(self.notified)))
        h.update(fx.flow_bytes(self.flow, self.fair))
        h.update(f"|{self.turns}|{self.position}".encode())
        return h.hexdigest()

    # -- persistence hooks (not part of the fold) ------------------------------------

    def row(self, key: str) -> bytes | None:
        """The encoded value of one persisted row (None: the row does not exist)."""
        return encode_row(self, key)

    def rows_of(self, keys: Iterable[str]) -> Iterator[tuple[str, bytes | None]]:
        """`(key, row(key))` for each of `keys`, in their order: what a save writes, with a
        held Work's row encoded without the calls `row` makes for any key."""
        works, encode, held = self.works, self.codec.encode, dict.get
        for key in keys:
            if key.startswith(WORK_ROW):
                work = held(works, key[5:])
                if work is None:  # not held (a quiet Work a store finds on demand), or gone
                    work = works.get(key[5:])
                yield key, None if work is None else encode(work)
            else:
                yield key, encode_row(self, key)

    def row_keys(self) -> Iterator[str]:
        return persisted_keys(self)  # every persisted row key, in no particular order

    @classmethod
    def restore(
        cls, position: int, works: Iterable[WorkState], fields: dict[str, Any]
    ) -> SchedulerProjection:
        """A projection at `position` holding `works` and the other fields given, with every
        index derived by the fold's own `_index` (as if each Work had just been applied)."""
        self = cls()
        self.position = position
        for name, value in fields.items():
            if name not in (*SINGLETONS, "ledgers", "notified", "codec"):
                raise KeyError(f"no field {name!r} in the scheduler projection")
            setattr(self, name, value)
        for work in works:
            self.works[work.work_id] = work
        self._reindex()
        return self

    @classmethod
    def from_rows(cls, position: int, rows: Iterable[tuple[str, bytes]]) -> SchedulerProjection:
        """Decode persisted rows (as `row()` encodes them) into a projection at `position`."""
        return cls.restore(position, *decode_rows(rows))

    def active_works(self) -> set[str]:
        """The Works some index names (the rest are quiet: see `OnDemandWorks`)."""
        active = {*self.startable, *self.timers, *self.live.values()}
        for holders in self.slots.values():
            active.update(execution.rpartition("/")[0] for execution in holders)
        return active

    def forget_quiet(self, active: set[str] | None = None) -> int:
        """After a save: drop the quiet Works from memory (store-backed only); how many.
        `active`: `active_works()` if the caller has it already (it is taken over)."""
        works = self.works
        if not isinstance(works, OnDemandWorks):
            return 0
        keep = self.active_works() if active is None else active
        keep.update(key[len(WORK_ROW) :] for key in self.dirty if key.startswith(WORK_ROW))
        return works.forget(keep)


# The row keys and held Works the projection stores import from here, beside the projection.
__all__ = ["ACTIVE_ROW", "WORK_ROW", "OnDemandWorks", "SchedulerProjection", "is_quiet"]
