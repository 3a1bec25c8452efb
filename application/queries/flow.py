"""Flow control as the read side shows it: the concurrency keys, rate buckets and pauses of
the capacity view (`flow_capacity`), and what priority and fair share did to a ready Work,
for `rota explain` (`recent_starts`, `fair_share`).

Nothing here is persisted: the recent starts are read from the log's tail (a bounded
window of the newest events), the rest from the scheduler projection at the log head.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

import msgspec

from rota.application.ports import EventStore
from rota.application.timestamps import format_timestamp
from rota.domain.admission import Waiting
from rota.domain.errors import DomainCode
from rota.domain.events import AttemptClaimed
from rota.domain.flow import OLDEST, due, interval_us, micros, rate_text, tokens
from rota.domain.flow_checks import THROTTLE
from rota.domain.state import WorkState
from rota.projections.scheduler import SchedulerProjection

_KEY_HELD = re.compile(r"^key (\S+) at \d+/\d+$")
PASS_LIMIT = 256  # a host's start pass starts at most this many Work (`Host.start_batch`)
SCAN = 4096  # the newest events read for the recent starts
KEEP = 64  # of which at most this many starts are kept


class KeyUse(msgspec.Struct, frozen=True, kw_only=True):
    """A concurrency key with a limit: its limit, the slots held under it, the ready Work
    it held back on the last start pass (`waiting`) and would hold back now (`preview`)."""

    limit: int
    in_use: int
    waiting: int
    preview: int = 0


class BucketUse(msgspec.Struct, frozen=True, kw_only=True):
    """A rate bucket (`resource:stripe`, `pool:jobs`, `throttle:<key>`): the rule that bounds
    it, its rate in words, its burst, the tokens in it now and when its next whole token is
    due (None: it is full)."""

    rule: str
    rate: str
    burst: int
    tokens: float
    next_token: str | None


class PausedTarget(msgspec.Struct, frozen=True, kw_only=True):
    """A paused pool, key or scope (`rota pause`), and the reason given."""

    target: str
    name: str
    reason: str


class WaitingLike(Protocol):
    """What the key counts read of a waiting Work (`WaitingWork`)."""

    @property
    def work(self) -> str: ...

    @property
    def code(self) -> str: ...

    @property
    def detail(self) -> str: ...


def flow_capacity(
    projection: SchedulerProjection,
    now: datetime,
    ready: list[WorkState],
    waiting: Iterable[WaitingLike],
    preview: Iterable[WaitingLike],
) -> tuple[dict[str, KeyUse], dict[str, BucketUse], list[PausedTarget]]:
    """The limited keys in use or holding Work back, every bucket the log has taken from,
    and the pauses in force. `ready` (the ready queue) names the throttles' periods."""
    rules = projection.rules
    held_last = _held_by_key(projection, waiting, ready)
    held_now = _held_by_key(projection, preview, ready)
    keys: dict[str, KeyUse] = {}
    for key in sorted({*projection.key_slots, *held_last, *held_now}):
        limit = rules.limit(key)
        in_use = len(projection.key_slots.get(key, ()))
        if not limit or not (in_use or key in held_last or key in held_now):
            continue
        keys[key] = KeyUse(
            limit=limit,
            in_use=in_use,
            waiting=held_last.get(key, 0),
            preview=held_now.get(key, 0),
        )
    throttles = {
        f"{THROTTLE}:{w.throttle.key}": w.throttle.period for w in ready if w.throttle is not None
    }
    now_us = micros(now)
    buckets: dict[str, BucketUse] = {}
    for name, tat in sorted(projection.flow.buckets.items()):
        rule = rules.rate(name) if not name.startswith(f"{THROTTLE}:") else None
        if rule is not None:
            interval, burst, rule_key = interval_us(rule), rule.burst, rule.key
            words = rate_text(rule.count, rule.period)
        elif name in throttles:
            period = throttles[name]
            interval, burst, rule_key = max(1, round(period * 1_000_000)), 1, THROTTLE
            words = f"1 start per {period:g} s"
        else:
            continue  # a rule since removed, or a throttle no ready Work names
        have = tokens(tat, now_us, interval, burst)
        next_token = None
        if have < burst:  # the moment it holds one whole token more than now
            at_us = due(tat, math.floor(have) + 1, interval, burst)
            next_token = format_timestamp(now + timedelta(microseconds=max(0, at_us - now_us)))
        buckets[name] = BucketUse(
            rule=rule_key, rate=words, burst=burst, tokens=round(have, 3), next_token=next_token
        )
    paused = []
    for target, reason in sorted(projection.flow.paused.items()):
        kind, _, name = target.partition(":")
        paused.append(PausedTarget(target=kind, name=name, reason=reason))
    return keys, buckets, paused


def held_key(detail: str) -> str | None:
    """The key a `capacity_key` detail names (`key tenant:acme at 3/3`)."""
    match = _KEY_HELD.match(detail)
    return None if match is None else match.group(1)


def _held_by_key(
    projection: SchedulerProjection, waiting: Iterable[WaitingLike], ready: list[WorkState]
) -> Counter[str]:
    """How many ready Works each concurrency key holds back: those `waiting` names (the
    detail names the key) and, behind a flow head it held, the rest of that flow at that
    priority, which the pass then considered no more (`Chooser.drop`)."""
    counts: Counter[str] = Counter()
    listed: set[str] = set()
    heads: set[tuple[str, int]] = set()
    for item in waiting:
        listed.add(item.work)
        if item.code != DomainCode.CAPACITY_KEY:
            continue
        key = held_key(item.detail)
        if key is None:
            continue
        counts[key] += 1
        head = projection.works.get(item.work)
        if head is not None and head.keys and head.keys[0] == key:
            heads.add((key, head.priority))
    if heads:
        for work in ready:
            flow = (work.keys[0], work.priority) if work.keys else None
            if flow in heads and work.work_id not in listed:
                counts[work.keys[0]] += 1
    return counts


FLOW_CODES = (DomainCode.CAPACITY_KEY, DomainCode.RATE_LIMITED, DomainCode.FLOW_PAUSED)


def held_with_flow(
    projection: SchedulerProjection, work: WorkState, waiting: Iterable[Waiting]
) -> Waiting | None:
    """Why a ready Work a start pass never reached waits: a pass that finds the head of a
    flow held back by its flow key (full, paused, out of tokens) considers no more of that
    flow (`Chooser.drop`), so the reason is its flow head's, at the same priority."""
    if not work.keys:
        return None
    flow = work.keys[0]
    for item in waiting:
        if item.code not in FLOW_CODES or item.work_id == work.work_id:
            continue
        head = projection.works.get(item.work_id)
        if head is not None and head.keys[:1] == (flow,) and head.priority == work.priority:
            return Waiting(work.work_id, item.code, item.detail)
    return None


# -- explain: priority and fair share ----------------------------------------------------


class RecentStart(NamedTuple):
    """A start the log's tail holds: its claim's position, the Work's priority and flow, and
    whether the starvation bound chose it."""

    position: int
    work_id: str
    priority: int
    flow: str
    oldest: bool


def recent_starts(
    store: EventStore, projection: SchedulerProjection, *, scan: int = SCAN, keep: int = KEEP
) -> list[RecentStart]:
    """The newest starts (at most `keep`) among the newest `scan` events, oldest first; each
    Work's priority and flow as the projection holds them now."""
    head = store.head().position
    found: list[RecentStart] = []
    for recorded in store.read(after=max(0, head - scan), limit=scan):
        event = recorded.event
        if not isinstance(event, AttemptClaimed):
            continue
        work = projection.works.get(event.work_id)
        priority, keys, scope = (
            (0, (), "") if work is None else (work.priority, work.keys, work.scope)
        )
        oldest = OLDEST in event.passes
        flow = projection.rules.flow(keys, scope) if scope else ""
        found.append(RecentStart(recorded.position, event.work_id, priority, flow, oldest))
    return found[-keep:]


def flow_words(flow: str) -> str:
    return flow or "(no key)"


def fair_share(
    projection: SchedulerProjection,
    work: WorkState,
    starts: list[RecentStart],
    *,
    since: int,
    order: int | None = None,
    pass_limit: int = PASS_LIMIT,
) -> list[tuple[str, list[int]]]:
    """What priority and fair share did to a ready Work since `since` (the position it
    became ready at), in words, each with the claims it cites: the starts of other flows at
    its priority, the starts at a higher priority, and whether it is past a pass's limit in
    the dry run's start `order` (1-based)."""
    said: list[tuple[str, list[int]]] = []
    after = [s for s in starts if s.position > since and s.work_id != work.work_id]
    mine = projection.rules.flow(work.keys, work.scope)
    rules = projection.rules
    level = [s for s in after if s.priority == work.priority]
    others = Counter(s.flow for s in level if s.flow != mine)
    if others:
        top, served = others.most_common(1)[0]
        weights = ", ".join(
            f"{flow_words(f)} {rules.weight(f)}" for f in sorted({top, mine}, key=flow_words)
        )
        text = (
            f"fair share: {flow_words(top)} served {served} of the last {len(level)} starts at "
            f"priority {work.priority} since this Work was ready (weights {weights})"
        )
        share = rules.share
        if share:
            text += (
                f"; 1 start in every {share} goes to the oldest ready Work "
                f"({projection.fair.since_oldest} since the last)"
            )
        said.append((text, [s.position for s in level if s.flow == top][-8:]))
    higher = [s for s in after if s.priority > work.priority]
    if higher:
        text = (
            f"priority: {len(higher)} of the last {len(after)} starts "
            f"{'was' if len(higher) == 1 else 'were'} at a higher priority "
            f"(this Work's is {work.priority})"
        )
        said.append((text, [s.position for s in higher][-8:]))
    if order is not None and order > pass_limit:
        text = (
            f"a start pass starts at most {pass_limit} Work: this one is number {order} in "
            "admission order, so a later pass reaches it"
        )
        said.append((text, []))
    return said


__all__ = [
    "PASS_LIMIT",
    "BucketUse",
    "KeyUse",
    "PausedTarget",
    "RecentStart",
    "fair_share",
    "flow_capacity",
    "held_key",
    "held_with_flow",
    "recent_starts",
]
