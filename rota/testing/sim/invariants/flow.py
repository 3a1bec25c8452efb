"""Invariants of flow control read from the log: concurrency keys and rate buckets
(issue 30, items 2, 3 and 9).

Both fold what they need on their own: the rules in force from `core.flow.configured`,
the slots under each key from the model's holders (an attempt holds its keys' slots
exactly while it holds its pool's: live, or ended with its stop unconfirmed), and each
bucket's theoretical arrival time from `core.rate.taken`, with the GCRA arithmetic
written out here again rather than borrowed from `rota.domain.flow`.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from rota.application.ports import RecordedEvent
from rota.domain.events import AttemptClaimed, AttemptResumed
from rota.domain.events.flow import FlowConfigured, RateRule, RateTaken
from rota.domain.flow import FlowRules
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Attempt, Model

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
THROTTLE = "throttle"


def micros(at: datetime) -> int:
    """Microseconds since the epoch, in integers."""
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def interval_of(rule: RateRule) -> int:
    """Microseconds a token of `rule` takes to come back (never faster than the rate)."""
    return max(1, math.ceil(rule.period * 1_000_000 / rule.count))


class KeyLimitNeverExceeded(Invariant):
    """No start takes a concurrency key past its limit: live attempts and unconfirmed holds
    under the key stay within the limit in force.

    Issue 30, item 2: "A key's limit counts live attempts and unconfirmed holds, like
    pools." Slots under a key only grow by a claim or a resume, so checking each of them
    checks every position. The limit is the one of the last `core.flow.configured`
    (an exact `[[keys]]` rule over the longest matching prefix; 0 or none: unbounded).
    """

    name = "key_limit_never_exceeded"
    events = (FlowConfigured, AttemptClaimed, AttemptResumed)

    def __init__(self) -> None:
        self.rules = FlowRules()

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        if isinstance(event, FlowConfigured):
            self.rules = FlowRules(event)
            return []
        assert isinstance(event, AttemptClaimed | AttemptResumed)
        work = model.works.get(event.work_id)
        if work is None or not work.keys:
            return []
        if isinstance(event, AttemptResumed):
            current = work.current
            if current is None or current.number != event.attempt:
                return []
        execution = f"{event.work_id}/{event.attempt}"
        found: list[Violation] = []
        for key in work.keys:
            limit = self.rules.limit(key)
            if not limit:
                continue
            holders = _under(model, key, execution)
            if len(holders) + 1 > limit:
                names = ", ".join(sorted(a.execution for a in holders))
                found.append(
                    self.violation(
                        f"{execution} started under key {key} while {len(holders)} attempts "
                        f"held its {limit} slots ({names})",
                        *sorted(a.claimed_at for a in holders)[:16],
                        at,
                    )
                )
        return found


def _under(model: Model, key: str, execution: str) -> list[Attempt]:
    """The attempts holding a slot under `key` (live, or ended with their stop
    unconfirmed), `execution` left out."""
    found: list[Attempt] = []
    for holders in model.pools.values():
        for name, attempt in holders.items():
            if name == execution:
                continue
            work = model.works.get(attempt.work_id)
            if work is not None and key in work.keys:
                found.append(attempt)
    return found


class BucketEqualsItsFold(Invariant):
    """Every rate bucket equals its fold: each `core.rate.taken` is recomputed from the bucket
    before it, every take was allowed (the bucket never goes below zero tokens), and the
    projection holds the last result.

    Issue 30, item 3: "the bucket's state is a fold of events (tokens taken at claim, in
    the claim's transaction), so several hosts on PostgreSQL share one bucket exactly and
    a rebuild gives the same bucket." With `tat` the bucket's previous `tat_us` (0 for a
    new bucket) and `now` = `decided_at` in microseconds: `t = max(tat, now)`, each take
    moves `t` on by `cost * interval_us` and must leave `t - burst * interval_us <= now`,
    and the event's `tat_us` must be the final `t`. The interval and burst must be the
    rule's in force (`[[rates]]`: `ceil(period / count)`; a throttle: its period, burst
    1). The projection's buckets are compared with this fold (`compare`).
    """

    name = "bucket_equals_its_fold"
    events = (FlowConfigured, RateTaken)

    def __init__(self) -> None:
        self.rules = FlowRules()
        self.tats: dict[str, int] = {}
        self.at: dict[str, int] = {}  # bucket -> the position of its last take

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        if isinstance(event, FlowConfigured):
            self.rules = FlowRules(event)
            return []
        assert isinstance(event, RateTaken)
        name, before = event.bucket, self.at.get(event.bucket)
        tat = self.tats.get(name, 0)
        now = micros(event.decided_at)
        interval, burst = event.interval_us, event.burst
        found: list[Violation] = []
        if event.rule != THROTTLE:
            rule = self.rules.rate(name)
            if rule is None:
                found.append(self.violation(f"tokens taken from {name}, which no rule bounds", at))
            elif (interval, burst) != (interval_of(rule), rule.burst):
                found.append(
                    self.violation(
                        f"bucket {name} taken at interval {interval} µs, burst {burst}; its "
                        f"rule {rule.key} says {interval_of(rule)} µs, burst {rule.burst}",
                        at,
                    )
                )
        elif burst != 1:
            found.append(self.violation(f"throttle {name} taken with burst {burst}, not 1", at))
        t = max(tat, now)
        for taken in event.takes:
            t += taken.cost * interval
            if t - burst * interval > now:
                found.append(
                    self.violation(
                        f"{taken.execution} took {taken.cost} from {name} at {now} µs, "
                        f"{t - burst * interval - now} µs before the bucket had them: it "
                        "went below zero tokens",
                        before,
                        at,
                    )
                )
                break
        if t != event.tat_us:
            found.append(
                self.violation(
                    f"bucket {name}: {len(event.takes)} takes from {tat} at {now} fold to {t}, "
                    f"but the event records {event.tat_us}",
                    before,
                    at,
                )
            )
        self.tats[name], self.at[name] = event.tat_us, at
        return found

    def compare(self, buckets: dict[str, int], position: int) -> list[Violation]:
        """Violations where a projection's buckets differ from this fold."""
        if buckets == self.tats:
            return []
        differ = sorted(b for b in {*buckets, *self.tats} if buckets.get(b) != self.tats.get(b))
        name = differ[0]
        return [
            self.violation(
                f"the projection's bucket {name} is {buckets.get(name)}, its fold "
                f"{self.tats.get(name)}",
                self.at.get(name),
                position,
            )
        ]
