"""Flow control's checks in a start pass: pauses, concurrency keys, rate buckets. Pure.

`FlowPass` holds what one pass took so far (slots under each key, tokens from each
bucket) on top of what the log says (`FlowView`), answers whether a Work is held back
(`hold`: a `Waiting`, and whether its whole flow is), records an admitted Work's share
(`admit`), and at the end gives the fences: one `core.capacity.key_claimed` per limited
key and one `core.rate.taken` per bucket it took from (`emits`), whose streams' versions
fence the append, so racing hosts never both take the last slot or token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rota.domain.emit import Emit
from rota.domain.errors import DomainCode
from rota.domain.events.flow import KeyCapacityClaimed, RateTake, RateTaken
from rota.domain.flow import (
    Fairness,
    FlowRules,
    due,
    interval_us,
    micros,
    rate_text,
    take,
    tokens,
)
from rota.domain.state import WorkState

THROTTLE = "throttle"


@dataclass(frozen=True)
class FlowView:
    """What the log says of flow control when a pass begins (the projection's fold)."""

    rules: FlowRules = field(default_factory=FlowRules)
    buckets: Mapping[str, int] = field(default_factory=dict)
    key_in_use: Callable[[str], int] = lambda key: 0
    fair: Fairness = field(default_factory=Fairness)
    paused: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Bucket:
    name: str
    rule: str  # the `[[rates]]` key that bounds it, or `throttle`
    words: str  # its rate in words: `100/min`
    interval: int
    burst: int


@dataclass(frozen=True)
class Held:
    code: str
    detail: str
    whole_flow: bool  # every Work of the Work's flow is held back by the same thing


class FlowPass:
    """One pass's flow-control bookkeeping; see the module docstring."""

    def __init__(self, view: FlowView, now: datetime) -> None:
        self.view = view
        self.rules = view.rules
        self.now = now
        self.now_us = micros(now)
        self.idle = view.rules.empty and not view.paused  # no rule, no pause: nothing to do
        self.key_taken: dict[str, list[str]] = {}
        self.tats: dict[str, int] = {}
        self.takes: dict[str, list[RateTake]] = {}
        self.buckets: dict[str, Bucket] = {}
        self.full: dict[str, Held] = {}  # a key or bucket found full this pass
        self.next_due: datetime | None = None
        self._staged: list[tuple[Bucket, int]] = []

    def known_full(self, work: WorkState) -> Held | None:
        """A key or bucket of the Work already found full this pass (a cheap skip)."""
        if not self.full:
            return None
        for key in work.keys:
            held = self.full.get(key)
            if held is not None:
                return held
        if work.throttle is not None:
            return self.full.get(f"{THROTTLE}:{work.throttle.key}")
        return None

    def hold(self, work: WorkState, pool: str, scopes: list[str]) -> Held | None:
        """Why the Work may not start now (None: flow control lets it)."""
        self._staged = []
        not_before = work.not_before
        if not_before is not None and self.now < not_before and not work.attempts:
            return self._debounced(work, not_before)
        if self.idle and work.throttle is None:
            return None
        paused = self.view.paused
        if paused:
            targets = [f"pool:{pool}", *(f"scope:{s}" for s in scopes)]
            targets.extend(f"key:{k}" for k in work.keys)
            for target in targets:
                if target in paused:
                    kind, _, name = target.partition(":")
                    reason = paused[target]
                    detail = f"{kind} {name} is paused" + (f" ({reason})" if reason else "")
                    flow_key = bool(work.keys) and target == f"key:{work.keys[0]}"
                    return Held(DomainCode.FLOW_PAUSED, detail, flow_key)
        rules = self.rules
        for index, key in enumerate(work.keys):
            limit = rules.limit(key)
            if not limit:
                continue
            used = self.view.key_in_use(key) + len(self.key_taken.get(key, ()))
            if used >= limit:
                held = Held(DomainCode.CAPACITY_KEY, f"key {key} at {used}/{limit}", index == 0)
                self.full[key] = held
                return held
        staged = []
        for bucket, whole in self._buckets(work, pool):
            tat = self.tats.get(bucket.name)
            if tat is None:
                tat = self.view.buckets.get(bucket.name, 0)
            after = take(tat, self.now_us, work.cost, bucket.interval, bucket.burst)
            if after is None:
                return self._rate_held(work, bucket, tat, whole)
            staged.append((bucket, after))
        self._staged = staged
        return None

    def _debounced(self, work: WorkState, not_before: datetime) -> Held:
        """The Work's debounce window is open: it starts at `not_before` (the host wakes)."""
        if self.next_due is None or not_before < self.next_due:
            self.next_due = not_before
        wait = (not_before - self.now).total_seconds()
        key = work.debounce.key if work.debounce is not None else "?"
        detail = f"debounce window of {key} open, starts in {wait:.1f} s"
        return Held(DomainCode.DEBOUNCED, detail, False)

    def _rate_held(self, work: WorkState, bucket: Bucket, tat: int, whole: bool) -> Held:
        at_us = due(tat, work.cost, bucket.interval, bucket.burst)
        at = self.now + timedelta(microseconds=at_us - self.now_us)
        if self.next_due is None or at < self.next_due:
            self.next_due = at
        wait = (at_us - self.now_us) / 1e6
        have = tokens(tat, self.now_us, bucket.interval, bucket.burst)
        what = "start" if bucket.rule == THROTTLE else "token"
        detail = (
            f"waiting on rate:{bucket.name} {bucket.words} ({have:.1f}/{bucket.burst} tokens, "
            f"costs {work.cost}), next {what} in {wait:.1f} s"
        )
        held = Held(DomainCode.RATE_LIMITED, detail, whole)
        if have < 1:
            self.full[bucket.name] = held
        return held

    def _buckets(self, work: WorkState, pool: str) -> list[tuple[Bucket, bool]]:
        found: list[tuple[Bucket, bool]] = []
        rules = self.rules
        if not rules.empty:
            for index, name in enumerate((f"pool:{pool}", *work.keys)):
                rule = rules.rate(name)
                if rule is not None:
                    bucket = self.buckets.get(name)
                    if bucket is None:
                        words = rate_text(rule.count, rule.period)
                        bucket = Bucket(name, rule.key, words, interval_us(rule), rule.burst)
                        self.buckets[name] = bucket
                    found.append((bucket, index == 1))
        if work.throttle is not None:
            name = f"{THROTTLE}:{work.throttle.key}"
            interval = max(1, round(work.throttle.period * 1_000_000))
            words = f"1 start per {work.throttle.period:g} s"
            found.append((Bucket(name, THROTTLE, words, interval, 1), False))
        return found

    def admit(self, work: WorkState, execution: str) -> None:
        """The Work starts: it takes its slots under limited keys and its tokens."""
        if self.idle and work.throttle is None:
            return
        for key in work.keys:
            if self.rules.limit(key):
                self.key_taken.setdefault(key, []).append(execution)
        for bucket, after in self._staged:
            self.tats[bucket.name] = after
            self.buckets[bucket.name] = bucket
            self.takes.setdefault(bucket.name, []).append(RateTake(execution, work.cost))
        self._staged = []

    def emits(self) -> tuple[list[Emit], set[str]]:
        """The fences of what the pass took, and their streams."""
        emits: list[Emit] = []
        fences: set[str] = set()
        for key, executions in self.key_taken.items():
            emits.append(Emit(f"key/{key}", KeyCapacityClaimed(key=key, executions=executions)))
            fences.add(f"key/{key}")
        for name, takes in self.takes.items():
            bucket = self.buckets[name]
            event = RateTaken(
                bucket=name,
                rule=bucket.rule,
                interval_us=bucket.interval,
                burst=bucket.burst,
                decided_at=self.now,
                takes=takes,
                tat_us=self.tats[name],
            )
            emits.append(Emit(f"rate/{name}", event))
            fences.add(f"rate/{name}")
        return emits, fences
