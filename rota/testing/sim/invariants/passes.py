"""Invariants of the start pass's choices: no head-of-line blocking, the starvation bound
and fair share (issue 30, items 1, 2, 4 and 9).

These judge each start pass the engine decides (`rota.domain.admission.plan_starts`), not
one event: the simulator records every call (`PassRecord`: every ready Work, the flow
view, the pools' and scopes' use, the settings and the plan it returned) whether or not
its append then succeeds, since each is a decision on one consistent view. `replay`
walks the plan's starts in order and keeps, beside them, its own account of the room
left: pool and scope slots, slots under limited keys, and each rate bucket and throttle
(the GCRA arithmetic again, in integer microseconds). A Work *could start* at a moment
when its pool, its limited scopes, its keys and its buckets have room, nothing of it is
paused, and the pass did not hold it for a reason of its own (a budget, a gate, its wait
predicate, its binding). Room only shrinks within a pass, so a Work that could start
after the pass could start at every moment of it.

The fair-share replica (virtual time, finish tags) starts from the view's `Fairness`
(the projection's fold of the claims) and follows start-time fair queuing as
`rota.domain.flow` documents it: a flow's tag is `max(V, finish)`; a start moves
`finish` on by `1 / weight` and `V` to its tag, unless the starvation bound chose it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rota.domain.admission import Plan, ancestors
from rota.domain.errors import DomainCode, RotaError
from rota.domain.events import AttemptClaimed, AttemptResumed
from rota.domain.flow import OLDEST, Fairness
from rota.domain.flow_checks import FlowView
from rota.domain.policy import Pinned, Settings
from rota.domain.state import WorkState
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.flow import THROTTLE, interval_of, micros

# Codes of a Work held back for room (a pool, a scope, a key, a bucket, a pause): any
# other code is a reason of the Work's own.
ROOM = frozenset(
    {
        DomainCode.CAPACITY_KEY,
        DomainCode.RATE_LIMITED,
        DomainCode.FLOW_PAUSED,
        DomainCode.CAPACITY_SCOPE,
        DomainCode.CAPACITY_POOL,
        DomainCode.CAPACITY_CONCURRENCY,
        DomainCode.CAPACITY_JOB_CONCURRENCY,
    }
)
_KEY = re.compile(r"^key (\S+) at ")
_RATE = re.compile(r"^waiting on rate:(\S+) ")
_PAUSED = re.compile(r"^(pool|scope|key) (\S+) is paused")


@dataclass
class PassRecord:
    """One start pass as the engine decided it (module docstring)."""

    groups: dict[tuple[int, str], list[WorkState]]
    now: datetime
    settings: Settings
    pin: Callable[[WorkState], Pinned]
    pool_in_use: Mapping[str, int]
    scope_in_use: Mapping[str, int]
    limit: int
    flow: FlowView
    plan: Plan
    position: int = 0  # the log's head when it was checked
    _found: dict[str, list[str]] | None = field(default=None, repr=False)

    def found(self) -> dict[str, list[str]]:
        """What `replay` found, by invariant (computed once)."""
        if self._found is None:
            self._found = replay(self)
        return self._found


class Room:
    """The room a pass leaves as its starts take it (module docstring)."""

    def __init__(self, record: PassRecord) -> None:
        self.record = record
        self.rules = record.flow.rules
        self.now = micros(record.now)
        self.pools: dict[str, int] = dict(record.pool_in_use)
        self.scopes: dict[str, int] = dict(record.scope_in_use)
        self.keys: dict[str, int] = {}
        self.tats: dict[str, int] = dict(record.flow.buckets)
        self._pools: dict[str, str | None] = {}

    def pool_of(self, work: WorkState) -> str | None:
        if work.work_id not in self._pools:
            try:
                pool: str | None = self.record.pin(work).registration.pool
            except RotaError:
                pool = None
            self._pools[work.work_id] = pool
        return self._pools[work.work_id]

    def buckets(self, work: WorkState, pool: str) -> Iterator[tuple[str, int, int]]:
        """(name, interval µs, burst) of every bucket a start of `work` takes from."""
        if self.rules.configured.rates:
            for name in (f"pool:{pool}", *work.keys):
                rule = self.rules.rate(name)
                if rule is not None:
                    yield name, interval_of(rule), rule.burst
        if work.throttle is not None:
            interval = max(1, round(work.throttle.period * 1_000_000))
            yield f"{THROTTLE}:{work.throttle.key}", interval, 1

    def _after(self, work: WorkState, name: str, interval: int, burst: int) -> int | None:
        after = max(self.tats.get(name, 0), self.now) + work.cost * interval
        return after if after - burst * interval <= self.now else None

    def fits(self, work: WorkState) -> bool:
        """Whether `work` could start now (its own reasons aside)."""
        pool = self.pool_of(work)
        if pool is None:
            return False
        settings, paused = self.record.settings, self.record.flow.paused
        limit = settings.pool_limit(pool)
        if limit and self.pools.get(pool, 0) >= limit:
            return False
        scopes = ancestors(work.scope)
        for scope in scopes:
            bound = settings.scope_limits.get(scope)
            if bound is not None and self.scopes.get(scope, 0) >= bound:
                return False
        if paused:
            targets = [f"pool:{pool}", *(f"scope:{s}" for s in scopes)]
            if any(t in paused for t in (*targets, *(f"key:{k}" for k in work.keys))):
                return False
        in_use = self.record.flow.key_in_use
        for key in work.keys:
            bound = self.rules.limit(key)
            if bound and in_use(key) + self.keys.get(key, 0) >= bound:
                return False
        return all(self._after(work, *bucket) is not None for bucket in self.buckets(work, pool))

    def take(self, work: WorkState) -> None:
        """`work` started: it takes its slots and tokens."""
        pool = self.pool_of(work)
        if pool is None:
            return
        self.pools[pool] = self.pools.get(pool, 0) + 1
        for scope in ancestors(work.scope):
            if scope in self.record.settings.scope_limits:
                self.scopes[scope] = self.scopes.get(scope, 0) + 1
        for key in work.keys:
            if self.rules.limit(key):
                self.keys[key] = self.keys.get(key, 0) + 1
        for name, interval, burst in self.buckets(work, pool):
            after = self._after(work, name, interval, burst)
            if after is not None:
                self.tats[name] = after


def flow_of(work: WorkState, scopes: Mapping[str, int]) -> str:
    """A Work's fair-share flow: its first key, else `scope:<path>` of the deepest scope at
    or above its own that `[[scopes]]` gives a weight, else ""."""
    if work.keys:
        return work.keys[0]
    path = work.scope
    while path:
        if path in scopes:
            return f"scope:{path}"
        path = path.rpartition("/")[0]
    return ""


def scope_weights(flow: FlowView) -> dict[str, int]:
    return {share.path: share.weight for share in flow.rules.configured.scopes}


def _tag(fair: Fairness, flow: str) -> float:
    finish = fair.finish.get(flow)
    return fair.vtime if finish is None or finish < fair.vtime else finish


def replay(record: PassRecord) -> dict[str, list[str]]:
    """Walk a pass's starts in order against the room they leave (module docstring); what
    each pass invariant finds, by name."""
    found: dict[str, list[str]] = {
        NoHeadOfLineBlocking.name: [],
        StarvationBound.name: [],
        FairShareOrder.name: [],
    }
    plan, flow = record.plan, record.flow
    ready = {w.work_id: w for works in record.groups.values() for w in works}
    own = {w.work_id for w in plan.waiting if w.code not in ROOM}  # its own reasons
    oldest_marked: set[str] = set()
    for emit in plan.emits:
        event = emit.event
        if isinstance(event, AttemptClaimed | AttemptResumed) and OLDEST in event.passes:
            oldest_marked.add(event.work_id)
    room = Room(record)
    single = len(record.groups) <= 1
    fair = Fairness(flow.fair.vtime, dict(flow.fair.finish), flow.fair.since_oldest)
    share, scopes = flow.rules.share, scope_weights(flow)

    def weight(name: str) -> int:
        return scopes.get(name[6:], 1) if name.startswith("scope:") else flow.rules.weight(name)

    left = dict(ready)
    for number, work_id in enumerate(plan.started, 1):
        work = left.pop(work_id, None)
        if work is None:
            continue
        could = [w for w in left.values() if w.work_id not in own and room.fits(w)]
        oldest = work_id in oldest_marked
        # (A start that could not start breaks a limit: the log's invariants report it.)
        if room.fits(work) and not single:
            could.append(work)

            def order(w: WorkState) -> tuple[int, float, int]:
                return (-w.priority, _tag(fair, flow_of(w, scopes)), w.pending[0].position)

            best = min(could, key=order)
            lower = [w for w in could if w.priority < best.priority]
            turn = bool(share) and fair.since_oldest >= share - 1
            if turn and lower:
                first = min(lower, key=lambda w: w.pending[0].position)
                if first.pending[0].position < work.pending[0].position:
                    found[StarvationBound.name].append(
                        f"start {number} of the pass ({work_id}) came {fair.since_oldest} "
                        f"starts after the last one the starvation bound chose (share "
                        f"{share}), yet it is younger than the oldest Work that could start at "
                        f"a lower priority than fair share's choice: {first.work_id} (priority "
                        f"{first.priority}, ready at {first.pending[0].position}; "
                        f"{work_id} at {work.pending[0].position})"
                    )
            elif not oldest and order(best) < order(work):
                mine, theirs = flow_of(work, scopes), flow_of(best, scopes)
                found[FairShareOrder.name].append(
                    f"start {number} of the pass went to {work_id} (priority "
                    f"{work.priority}, flow {mine!r} tagged {_tag(fair, mine):g}, ready at "
                    f"{work.pending[0].position}) while {best.work_id} could start first "
                    f"(priority {best.priority}, flow {theirs!r} tagged {_tag(fair, theirs):g}, "
                    f"ready at {best.pending[0].position})"
                )
        room.take(work)
        if not single:
            _serve(fair, flow_of(work, scopes), weight(flow_of(work, scopes)), oldest)
    blocked = found[NoHeadOfLineBlocking.name]
    if len(plan.started) < record.limit and len(ready) <= record.limit:
        waiting = {w.work_id: w for w in plan.waiting}
        for work in left.values():
            if work.work_id in own or not room.fits(work):
                continue
            held = waiting.get(work.work_id)
            why = "was never considered" if held is None else f"was held: {held.detail}"
            blocked.append(
                f"{work.work_id} (flow {flow_of(work, scopes)!r}) could start after the pass, "
                f"which started {len(plan.started)} of {len(ready)} ready Works, but {why}"
            )
    for held in plan.waiting:
        work = ready.get(held.work_id)
        if work is not None and not _names_its_own(room, work, held.code, held.detail):
            blocked.append(
                f"{held.work_id} (keys {list(work.keys)}) was held for another's room: "
                f"{held.code}: {held.detail}"
            )
    return found


def _serve(fair: Fairness, flow: str, weight: int, oldest: bool) -> None:
    start = _tag(fair, flow)
    fair.finish[flow] = start + 1.0 / weight
    if oldest:
        fair.since_oldest = 0
    else:
        fair.vtime = start
        fair.since_oldest += 1


def _names_its_own(room: Room, work: WorkState, code: str, detail: str) -> bool:
    """Whether a flow-control hold names the Work's own key, bucket or pause."""
    if code == DomainCode.CAPACITY_KEY:
        match = _KEY.match(detail)
        return match is not None and match.group(1) in work.keys
    if code == DomainCode.RATE_LIMITED:
        match = _RATE.match(detail)
        pool = room.pool_of(work)
        own = {*work.keys, *([f"pool:{pool}"] if pool else [])}
        if work.throttle is not None:
            own.add(f"{THROTTLE}:{work.throttle.key}")
        return match is not None and match.group(1) in own
    if code == DomainCode.FLOW_PAUSED:
        match = _PAUSED.match(detail)
        if match is None:
            return False
        kind, name = match.groups()
        if kind == "key":
            return name in work.keys
        if kind == "scope":
            return name in ancestors(work.scope)
        return name == room.pool_of(work)
    return True


class _PassInvariant(Invariant):
    """An invariant of start passes (`observe_pass`); it reads no event."""

    events = ()

    def observe_pass(self, record: PassRecord) -> list[Violation]:
        return [self.violation(m, record.position) for m in record.found()[self.name]]


class NoHeadOfLineBlocking(_PassInvariant):
    """No start pass leaves a ready Work unstarted that could start, and a Work held back by
    flow control is held by its own key, bucket or pause, never another's.

    Issue 30, item 2: "A Work blocked by its key never blocks ready Work of other keys (no
    head-of-line blocking, tested)." After the pass (when it started fewer Works than its
    limit and had no more ready Works than that), every ready Work that could still start
    (module docstring) must have been started or held for a reason of its own; and every
    `capacity_key`, `rate_limited` or `flow_paused` hold must name one of the Work's own
    keys, its pool's or its throttle's bucket, or its own pool, scope or key's pause.
    """

    name = "no_head_of_line_blocking"


class StarvationBound(_PassInvariant):
    """Of every `share` starts, at least one goes to the oldest Work that could start then
    at a lower priority than fair share's choice, while there is one.

    Issue 30, item 1: "Starvation is bounded: document and test the bound (aging or a
    reserved share), not "eventually"." Checked per pass while more than one group (a
    priority and flow) is ready: once `share - 1` starts went by since the bound last chose
    (the view's `since_oldest`, then the pass's own count), if a ready Work that could
    start at that moment waits at a lower priority than the Work fair share would choose,
    the next start is no younger than the oldest of those (module docstring: the chooser
    takes the oldest below its own choice, which may be a Work that cannot start, so it
    may reach an older Work at a level between); within one level the
    fair-share order holds instead (`fair_share_order`). Hence the bound: a ready Work
    that can start throughout is started within `share * (k + 1)` starts, `k` the ready
    Works older than it (each start the bound chooses goes to it or to one of them, and
    none of them is chosen twice unless it is ready again; an older Work of its own level
    is served by fair share).
    """

    name = "starvation_bound"


class FairShareOrder(_PassInvariant):
    """Within a pass, each start the starvation bound did not choose goes to the Work with the
    smallest (priority, fair-share tag of its flow, readiness) of those that could start
    then.

    Issue 30, item 4: "within a priority level, admission serves keys by weighted fair
    queuing (virtual time, as in trigger.dev PR #4367, not round robin over arrival
    order)." Priority levels are strict; within a level the flow with the smallest
    start tag `max(V, finish)` goes first, ties to the older Work; only Works that could
    start take part, so a blocked flow neither holds the others back nor the virtual time
    down. This is start-time fair queuing's selection rule, from which its bound follows:
    two flows of one level with weights w1 and w2 that are ready and can start throughout
    a window of starts are served S1 and S2 times with |S1/w1 - S2/w2| <= 1/w1 + 1/w2,
    plus max(1/w1, 1/w2) for each start the starvation bound chose in the window (such a
    start pays its tag out of turn).
    """

    name = "fair_share_order"


def plan_recorder(
    original: Callable[..., Plan], sink: Callable[[PassRecord], None]
) -> Callable[..., Plan]:
    """`plan_starts` wrapped to hand `sink` a `PassRecord` of every call. The ready groups
    are drawn out whole first (the projection hands them lazily) and given back to
    `original` in the same order."""

    def recorded(works: Any, **kw: Any) -> Plan:
        if isinstance(works, Mapping):
            groups = {group: list(members) for group, members in works.items()}
        else:
            groups, scopes = {}, scope_weights(kw.get("flow", FlowView()))
            for work in works:
                groups.setdefault((-work.priority, flow_of(work, scopes)), []).append(work)
            groups = dict(sorted(groups.items()))
        plan = original({g: iter(m) for g, m in groups.items()}, **kw)
        sink(
            PassRecord(
                groups=groups,
                now=kw["now"],
                settings=kw["settings"],
                pin=kw["pin"],
                pool_in_use=kw["pool_in_use"],
                scope_in_use=kw["scope_in_use"],
                limit=kw.get("limit", 256),
                flow=kw.get("flow", FlowView()),
                plan=plan,
            )
        )
        return plan

    return recorded


__all__ = [
    "FairShareOrder",
    "NoHeadOfLineBlocking",
    "PassRecord",
    "StarvationBound",
    "plan_recorder",
    "replay",
]
