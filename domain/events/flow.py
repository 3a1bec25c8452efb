"""Events of flow control: the key and rate rules in force, tokens taken from rate
buckets, slots taken under concurrency keys, priority changes, and paused pools, keys and
scopes (`rota.domain.flow`)."""

from datetime import datetime
from typing import ClassVar, Literal

import msgspec

from rota.domain.events.base import Event

PauseTarget = Literal["pool", "key", "scope"]


class KeyRule(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """`[[keys]]`: a concurrency key (`tenant:acme`) or a prefix of keys (`tenant:*`: the
    default of every key it matches, each counted on its own), its concurrency limit
    (None: unbounded) and its fair-share weight (None: 1)."""

    key: str
    concurrency: int | None = None
    weight: int | None = None


class RateRule(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """`[[rates]]`: a token bucket on a key (or a prefix of keys) or a pool (`pool:<name>`):
    `count` tokens a `period` seconds (`rate = "100/min"`), holding at most `burst`."""

    key: str
    count: int
    period: float
    burst: int = 1


class ScopeShare(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """`[[scopes]] weight`: the Works without keys at or under `path` share one fair-share
    flow, `scope:<path>` (the deepest such scope), served with `weight`."""

    path: str
    weight: int


class FlowConfigured(Event, tag="core.flow.configured", frozen=True, kw_only=True):
    """The key and rate rules and the scopes' fair-share weights in force from this
    position on (recorded when the configuration changes, like the budgets). With none,
    admission is what it was before flow control: pools, scopes, gates and budgets, in
    priority then readiness order. `scopes` was added later (absent: none)."""

    stream_pattern: ClassVar[str] = "flow/config"

    keys: list[KeyRule] = msgspec.field(default_factory=list)
    rates: list[RateRule] = msgspec.field(default_factory=list)
    # Of every `share` starts, at least one goes to the oldest ready Work, whatever its
    # priority or flow (the starvation bound; `rota.domain.flow`).
    share: int = 10
    # Fair-share weights of scopes (`[[scopes]] weight`): the flow of Work without keys.
    scopes: list[ScopeShare] = msgspec.field(default_factory=list)


class RateTake(msgspec.Struct, frozen=True, gc=False):
    """Tokens one start took from a bucket."""

    execution: str
    cost: int = 1


class RateTaken(Event, tag="core.rate.taken", frozen=True, kw_only=True):
    """Starts took tokens from a rate bucket, in the claims' append (fences racing hosts).

    The bucket is a GCRA fold in integer microseconds: with `tat` the theoretical arrival
    time before (0 for a new bucket) and `now` = `decided_at`, each take moves
    `t = max(tat, now)` on by `cost * interval_us`, and is allowed only if
    `t - burst * interval_us <= now` (never below zero tokens); `tat_us` is the bucket after
    the takes. `rule` names the `[[rates]]` entry that bounds the bucket."""

    stream_pattern: ClassVar[str] = "rate/<bucket>"

    bucket: str
    rule: str
    interval_us: int
    burst: int
    decided_at: datetime
    takes: list[RateTake]
    tat_us: int


class KeyCapacityClaimed(Event, tag="core.capacity.key_claimed", frozen=True, kw_only=True):
    """Slots under limited concurrency keys were taken by a start pass: `claims` maps each
    key to the executions that took one. One event a pass, on one stream for every key, so
    its version fences racing claims (two hosts cannot both take a key's last slot) at the
    cost of one event, not one per key."""

    stream_pattern: ClassVar[str] = "flow/keys"

    claims: dict[str, list[str]]


class WorkReprioritized(Event, tag="core.work.reprioritized", frozen=True, kw_only=True):
    """A Work's priority changed (higher starts first; the default is 0)."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    priority: int
    previous: int
    by: str = "operator"
    reason: str = ""


class FlowPaused(Event, tag="core.flow.paused", frozen=True, kw_only=True):
    """A pool, a key or a scope was paused: none of its ready Work starts until resumed.
    Nothing is deleted or re-queued; running attempts go on."""

    stream_pattern: ClassVar[str] = "flow/pauses"

    target: PauseTarget
    name: str
    by: str = "operator"
    reason: str = ""


class FlowResumed(Event, tag="core.flow.resumed", frozen=True, kw_only=True):
    """A paused pool, key or scope was resumed."""

    stream_pattern: ClassVar[str] = "flow/pauses"

    target: PauseTarget
    name: str
    by: str = "operator"


class CoalesceKeyTaken(Event, tag="core.submit.key_taken", frozen=True, kw_only=True):
    """A Work took a coalescing key: it opened the debounce window of `key` (`kind`
    `debounce`) or became the Work holding the unique `key` (`unique`). Later submits on the
    key are decided against it; the stream's version fences two hosts opening one key."""

    stream_pattern: ClassVar[str] = "coalesce/<kind>/<key>"
    delivery_pattern: ClassVar[str | None] = "coalesce/<kind>/<key>/<work>"

    kind: Literal["debounce", "unique"]
    key: str
    work_id: str


class SubmitMerged(Event, tag="core.submit.merged", frozen=True, kw_only=True):
    """A debounced submit was merged into the Work of its key's open window (`work_id`):
    its input (`input_key`, accepted on that Work in the same append unless the window
    holds that key already) is read by the window's run, and the start moves to
    `not_before` (`min(last + wait, first + max_wait)`). `requested` is the Work id the
    submit asked for, which is not created."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "coalesced/<requested>/<input key>"

    work_id: str
    requested: str
    key: str
    input_key: str | None = None
    not_before: datetime


class SubmitSuppressed(Event, tag="core.submit.suppressed", frozen=True, kw_only=True):
    """A unique submit was suppressed in favour of the Work holding its key (`work_id`):
    nothing was created; `requested` is the Work id it asked for, `until` the lifetime that
    refused it, and `input_key` / `input_digest` (the payload's derived key: `sha256:` and
    32 hex digits of its sorted JSON's SHA-256) name the input it carried, which no Work
    reads."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "coalesced/<requested>/<input key>"

    work_id: str
    requested: str
    key: str
    until: str
    input_key: str | None = None
    input_digest: str | None = None
