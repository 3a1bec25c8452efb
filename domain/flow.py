"""Flow control's values and arithmetic: keys, priorities, rules, rate buckets, fair share.
Pure.

- **Keys** (`tenant:acme`, `resource:stripe`): a Work carries up to `MAX_KEYS`. Its first
  key is its *flow*, what fair share serves; a Work without keys is in the flow `""`.
- **Rules** (`FlowRules`, from `core.flow.configured`): a `[[keys]]` or `[[rates]]` entry
  names one key or, ending in `*`, every key of a prefix (each key counted on its own); an
  exact rule wins over a prefix, a longer prefix over a shorter. A rate on `pool:<name>`
  bounds the starts of a pool.
- **Rate buckets** are GCRA in integer microseconds (`take`, `due`, `tokens`): the state of a
  bucket is one number, its theoretical arrival time, folded from `core.rate.taken`.
- **Fair share** is start-time fair queuing over the flows of one priority level: a flow's
  next start is tagged `max(V, finish[flow])`, the smallest tag starts first, and serving
  it moves `finish[flow]` on by `1 / weight` and `V` to that tag (`serve`). A flow back from
  idle starts at `V`, never behind it; only flows that can start are chosen, so a blocked
  flow does not hold `V` down.
- **Starvation bound**: of every `share` starts, at least one goes to the oldest ready Work
  when it waits at a lower priority than the fair choice (the claim records the pass
  `oldest`; `rota.domain.choosing`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import msgspec

from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events.flow import FlowConfigured, KeyRule, RateRule, ScopeShare

KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")
SCOPE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")  # a scope path: root/team
SCOPE_FLOW = "scope:"  # the fair-share flow of a scope's Work without keys: scope:<path>
RULE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}\*?$|^\*$")
MAX_KEYS = 8
MAX_PRIORITY = 1000
MAX_COST = 1_000_000
DEFAULT_SHARE = 10
OLDEST = "oldest"  # the claim pass of a start the starvation bound chose
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = {
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def check_keys(keys: Iterable[str]) -> tuple[str, ...]:
    """Refuse (`invalid_flow`) keys that are malformed, repeated or too many."""
    found = tuple(keys)
    if len(found) > MAX_KEYS:
        raise InvalidCommand(
            f"a Work carries {len(found)} keys; at most {MAX_KEYS}", code=DomainCode.INVALID_FLOW
        )
    for key in found:
        if type(key) is not str or not KEY.fullmatch(key):
            raise InvalidCommand(
                f"key {str(key)[:80]!a} must match {KEY.pattern} (like tenant:acme)",
                code=DomainCode.INVALID_FLOW,
            )
        if key.startswith(SCOPE_FLOW):
            raise InvalidCommand(
                f"key {key[:80]!a}: {SCOPE_FLOW}<path> names a scope's fair-share flow "
                "([[scopes]] weight), not a key: choose another prefix",
                code=DomainCode.INVALID_FLOW,
            )
    if len(set(found)) != len(found):
        raise InvalidCommand(f"keys {list(found)} name one key twice", code=DomainCode.INVALID_FLOW)
    return found


def check_priority(priority: object) -> int:
    """An integer in -MAX_PRIORITY..MAX_PRIORITY (higher starts first)."""
    if type(priority) is not int or not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidCommand(
            f"priority {priority!r} must be an integer from {-MAX_PRIORITY} to {MAX_PRIORITY}",
            code=DomainCode.INVALID_FLOW,
        )
    return priority


def check_cost(cost: object) -> int:
    """The tokens one start takes from each of its rate buckets: 1..MAX_COST."""
    if type(cost) is not int or not 1 <= cost <= MAX_COST:
        raise InvalidCommand(
            f"cost {cost!r} must be an integer from 1 to {MAX_COST}", code=DomainCode.INVALID_FLOW
        )
    return cost


def parse_rate(text: str) -> tuple[int, float]:
    """`"100/min"`, `"5/s"`, `"1000/hour"`, `"10/30s"` -> (count, period in seconds)."""
    match = _RATE.fullmatch(text.lower()) if isinstance(text, str) else None
    unit = _UNITS.get(match.group(3)) if match else None
    if match is None or unit is None:
        raise InvalidCommand(
            f"rate {str(text)[:40]!a} must be like 100/min, 5/s, 1000/hour or 10/30s",
            code=DomainCode.INVALID_FLOW,
        )
    count = int(match.group(1))
    period = float(match.group(2) or 1) * unit
    if count < 1 or period <= 0:
        raise InvalidCommand(
            f"rate {text!a} must allow at least one start a period", code=DomainCode.INVALID_FLOW
        )
    return count, period


def rate_text(count: int, period: float) -> str:
    """The canonical words of a rate: `100/min`, `5/s`, `10/30s`."""
    for name, seconds in (("day", 86400.0), ("hour", 3600.0), ("min", 60.0), ("s", 1.0)):
        if period == seconds:
            return f"{count}/{name}"
    return f"{count}/{period:g}s"


def check_rules(
    keys: Sequence[KeyRule],
    rates: Sequence[RateRule],
    share: int,
    scopes: Sequence[ScopeShare] = (),
) -> None:
    """Refuse (`invalid_flow`) rules a configuration cannot mean."""
    seen: set[str] = set()
    for scope in scopes:
        if not SCOPE.fullmatch(scope.path) or scope.path in seen:
            raise InvalidCommand(
                f"[[scopes]] {scope.path[:80]!a}: a weight needs one scope path (root/team)",
                code=DomainCode.INVALID_FLOW,
            )
        seen.add(scope.path)
        if not 1 <= scope.weight <= 1000:
            raise InvalidCommand(
                f"[[scopes]] {scope.path!r}: weight must be an integer from 1 to 1000",
                code=DomainCode.INVALID_FLOW,
            )
    seen.clear()
    for rule in keys:
        _rule_key(rule.key, "[[keys]]")
        if rule.key in seen:
            raise InvalidCommand(f"[[keys]] names {rule.key!r} twice", code=DomainCode.INVALID_FLOW)
        seen.add(rule.key)
        if rule.concurrency is not None and rule.concurrency < 0:
            raise InvalidCommand(
                f"[[keys]] {rule.key!r}: concurrency must be >= 0 (0: unbounded)",
                code=DomainCode.INVALID_FLOW,
            )
        if rule.weight is not None and not 1 <= rule.weight <= 1000:
            raise InvalidCommand(
                f"[[keys]] {rule.key!r}: weight must be an integer from 1 to 1000",
                code=DomainCode.INVALID_FLOW,
            )
    seen.clear()
    for rate in rates:
        _rule_key(rate.key, "[[rates]]")
        if rate.key in seen:
            raise InvalidCommand(
                f"[[rates]] names {rate.key!r} twice", code=DomainCode.INVALID_FLOW
            )
        seen.add(rate.key)
        if rate.count < 1 or not rate.period > 0 or not math.isfinite(rate.period):
            raise InvalidCommand(
                f"[[rates]] {rate.key!r}: the rate must allow at least one start a period",
                code=DomainCode.INVALID_FLOW,
            )
        if not 1 <= rate.burst <= MAX_COST:
            raise InvalidCommand(
                f"[[rates]] {rate.key!r}: burst must be an integer from 1 to {MAX_COST}",
                code=DomainCode.INVALID_FLOW,
            )
    if not 0 <= share <= 1000:
        raise InvalidCommand(
            f"starvation share {share} must be from 0 (off) to 1000", code=DomainCode.INVALID_FLOW
        )


def _rule_key(key: str, where: str) -> None:
    if not RULE_KEY.fullmatch(key):
        raise InvalidCommand(
            f"{where} key {key[:80]!a} must be a key (tenant:acme), a prefix ending in * "
            "(tenant:*) or pool:<name>",
            code=DomainCode.INVALID_FLOW,
        )


class FlowRules:
    """The rules in force, with the lookups admission makes (memoized per key)."""

    __slots__ = (
        "_key_memo",
        "_keys",
        "_rate_memo",
        "_rates",
        "_scope_memo",
        "configured",
        "scopes",
        "share",
    )

    def __init__(self, configured: FlowConfigured | None = None) -> None:
        configured = configured if configured is not None else FlowConfigured()
        self.configured = configured
        self.share = configured.share
        self._keys = _Matcher(configured.keys)
        self._rates = _Matcher(configured.rates)
        self._key_memo: dict[str, KeyRule | None] = {}
        self._rate_memo: dict[str, RateRule | None] = {}
        # `[[scopes]] weight`: path -> weight (empty: Work without keys is in flow "").
        self.scopes = {s.path: s.weight for s in configured.scopes}
        self._scope_memo: dict[str, str] = {}

    @property
    def empty(self) -> bool:
        configured = self.configured
        return not configured.keys and not configured.rates and not configured.scopes

    def flow(self, keys: Sequence[str], scope: str) -> str:
        """A Work's fair-share flow: its first key; without keys, its scope's
        (`scope_flow`); "" when neither names one."""
        if keys:
            return keys[0]
        return self.scope_flow(scope) if self.scopes else ""

    def scope_flow(self, scope: str) -> str:
        """`scope:<path>` of the deepest `[[scopes]]` weight at or above `scope`; else ""."""
        memo = self._scope_memo
        found = memo.get(scope)
        if found is None:
            found, path = "", scope
            while path:
                if path in self.scopes:
                    found = SCOPE_FLOW + path
                    break
                path = path.rpartition("/")[0]
            memo[scope] = found
        return found

    def key_rule(self, key: str) -> KeyRule | None:
        memo = self._key_memo
        if key not in memo:
            memo[key] = self._keys.find(key)
        return memo[key]

    def limit(self, key: str) -> int:
        """The concurrency limit of `key`; 0: unbounded."""
        rule = self.key_rule(key)
        return rule.concurrency or 0 if rule is not None else 0

    def weight(self, flow: str) -> int:
        if flow.startswith(SCOPE_FLOW):
            return self.scopes.get(flow[len(SCOPE_FLOW) :], 1)
        rule = self.key_rule(flow) if flow else None
        return rule.weight or 1 if rule is not None else 1

    def rate(self, bucket: str) -> RateRule | None:
        memo = self._rate_memo
        if bucket not in memo:
            memo[bucket] = self._rates.find(bucket)
        return memo[bucket]


class _Matcher:
    """Exact keys first, then the longest matching prefix (`tenant:*`), then `*`."""

    def __init__(self, rules: Sequence[KeyRule] | Sequence[RateRule]) -> None:
        self.exact = {r.key: r for r in rules if not r.key.endswith("*")}
        prefixes = [(r.key[:-1], r) for r in rules if r.key.endswith("*")]
        self.prefixes = sorted(prefixes, key=lambda item: -len(item[0]))

    def find(self, key: str):  # type: ignore[no-untyped-def]
        found = self.exact.get(key)
        if found is not None:
            return found
        for prefix, rule in self.prefixes:
            if key.startswith(prefix):
                return rule
        return None


# -- rate buckets (GCRA, integer microseconds) -------------------------------------------


def micros(at: datetime) -> int:
    """Microseconds since the epoch, exactly (no float)."""
    delta = at - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def interval_us(rule: RateRule) -> int:
    """Microseconds a token takes to come back (rounded up: never faster than the rate)."""
    return max(1, math.ceil(rule.period * 1_000_000 / rule.count))


def take(tat: int, now: int, cost: int, interval: int, burst: int) -> int | None:
    """The bucket after `cost` tokens are taken at `now`; None if it has too few."""
    after = max(tat, now) + cost * interval
    return after if after - burst * interval <= now else None


def due(tat: int, cost: int, interval: int, burst: int) -> int:
    """The first moment (µs) `cost` tokens can be taken."""
    return tat + (cost - burst) * interval


def tokens(tat: int, now: int, interval: int, burst: int) -> float:
    """Tokens in the bucket at `now` (0..burst)."""
    return max(0.0, burst - max(0, tat - now) / interval)


# -- fair share (start-time fair queuing) ------------------------------------------------


class Fairness(msgspec.Struct, gc=False):
    """Virtual time `vtime`, each flow's finish tag, and the starts since the last one the
    starvation bound chose: folded from the claims (`serve`)."""

    vtime: float = 0.0
    finish: dict[str, float] = msgspec.field(default_factory=dict)
    since_oldest: int = 0

    def __bool__(self) -> bool:
        """False while nothing was folded (one group so far: nothing to tag)."""
        return bool(self.finish or self.since_oldest or self.vtime)


def tag(fair: Fairness, flow: str) -> float:
    """The start tag of a flow's next start."""
    finish = fair.finish.get(flow)
    return fair.vtime if finish is None or finish < fair.vtime else finish


def serve(fair: Fairness, flow: str, weight: int, oldest: bool) -> None:
    """Fold one start of `flow` (chosen by the starvation bound when `oldest`)."""
    start = tag(fair, flow)
    fair.finish[flow] = start + 1.0 / weight
    if oldest:  # chosen out of its turn: it pays its tag but does not move V
        fair.since_oldest = 0
    else:
        fair.vtime = start
        fair.since_oldest += 1
    if len(fair.finish) > 1024:  # a flow at or behind V starts at V: it need not be kept
        vtime = fair.vtime
        fair.finish = {f: t for f, t in fair.finish.items() if t > vtime}


__all__ = [
    "DEFAULT_SHARE",
    "Fairness",
    "FlowRules",
    "check_cost",
    "check_keys",
    "check_priority",
    "check_rules",
    "parse_rate",
]
