"""Capacity and waiting by pool: `rota capacity --json`, `GET /v1/capacity`, the web
view's capacity page, doctor's capacity check and the metrics' pool gauges, from one
builder (`capacity_view`).

`waiting` is the daemon's last start pass, as the seed says: what this process's host
held back on its last pass (`Host.last_waiting`), so it reads 0 after a restart until the
first pass, and in a process that runs no pass (`rota capacity`, `rota serve`, doctor).
`preview` is a separate field: a dry run of admission now (`dry_run_starts`, a start pass
that writes nothing: who would start and who would wait why), true in any process.
`Work explain` (`rota.replay.explain`) asks the dry run too.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

import msgspec

from rota.application.configuration import Configuration
from rota.application.host import Host
from rota.application.queries.flow import BucketUse, KeyUse, PausedTarget, flow_capacity
from rota.application.service import SchedulerService
from rota.domain import admission
from rota.domain.admission import Waiting
from rota.domain.errors import DomainCode, RotaError
from rota.domain.state import WorkState
from rota.projections.scheduler import SchedulerProjection

CAPACITY_CODES = (
    DomainCode.CAPACITY_CONCURRENCY,
    DomainCode.CAPACITY_JOB_CONCURRENCY,
    DomainCode.CAPACITY_POOL,
)


class PoolUse(msgspec.Struct, frozen=True, kw_only=True):
    """One pool: its limit (0: unbounded), the slots in use, the ready Work its limit held
    back on the last start pass (`waiting`) and would hold back now (`preview`)."""

    limit: int
    in_use: int
    waiting: int
    preview: int = 0


class ScopeUse(msgspec.Struct, frozen=True, kw_only=True):
    limit: int
    in_use: int


class WaitingWork(msgspec.Struct, frozen=True, kw_only=True):
    """A ready Work that does not start, and why (a `DomainCode` and its detail)."""

    work: str
    code: str
    detail: str


class CapacityView(msgspec.Struct, frozen=True, kw_only=True):
    """`rota capacity --json`: `msgspec.to_builtins(view)` is the dict it prints.

    `waiting`: who the last start pass of this process held back, and why (empty until its
    first pass); `preview`: who a dry run of admission now would hold back, and why.
    Flow control: `keys`, each limited concurrency key in use or holding Work back;
    `buckets`, each rate bucket taken from (tokens now, next token due); `paused`, the
    pools, keys and scopes paused (`rota.application.queries.flow`)."""

    pools: dict[str, PoolUse]
    scopes: dict[str, ScopeUse]
    waiting: list[WaitingWork]
    preview: list[WaitingWork] = msgspec.field(default_factory=list)
    keys: dict[str, KeyUse] = msgspec.field(default_factory=dict)
    buckets: dict[str, BucketUse] = msgspec.field(default_factory=dict)
    paused: list[PausedTarget] = msgspec.field(default_factory=list)


# The same view as the plain dict `Scheduler.capacity()` returns (`to_builtins`), typed.


class PoolUseDict(TypedDict):
    limit: int
    in_use: int
    waiting: int
    preview: int


class ScopeUseDict(TypedDict):
    limit: int
    in_use: int


class WaitingWorkDict(TypedDict):
    work: str
    code: str
    detail: str


class KeyUseDict(TypedDict):
    limit: int
    in_use: int
    waiting: int
    preview: int


class BucketUseDict(TypedDict):
    rule: str
    rate: str
    burst: int
    tokens: float
    next_token: str | None


class PausedDict(TypedDict):
    target: str
    name: str
    reason: str


class CapacityDict(TypedDict):
    """`Scheduler.capacity()`: a `CapacityView` as the JSON of `rota capacity --json`."""

    pools: dict[str, PoolUseDict]
    scopes: dict[str, ScopeUseDict]
    waiting: list[WaitingWorkDict]
    preview: list[WaitingWorkDict]
    keys: dict[str, KeyUseDict]
    buckets: dict[str, BucketUseDict]
    paused: list[PausedDict]


def dry_run_starts(
    projection: SchedulerProjection,
    configuration: Configuration,
    now: datetime,
    ready: list[WorkState],
) -> admission.Plan:
    """A start pass of admission over `ready` (oldest first) at `now`, with no limit on
    starts and no gates: who would start and who waits why. Nothing is written."""
    settings = configuration.settings
    return admission.plan_starts(
        ready,
        now=now,
        owner=configuration.owner,
        settings=settings,
        pin=lambda work: configuration.pinned_for(work.binding, work.grants),
        pool_in_use={pool: len(h) for pool, h in projection.slots.items()},
        scope_in_use=projection.scope_in_use(settings.scope_limits),
        budgets=projection.budgets,
        used=projection.used,
        notified=projection.notified,
        gated=False,
        limit=len(ready) + 1,
        flow=projection.flow_view(),
    )


def waiting_by_pool(
    projection: SchedulerProjection, configuration: Configuration, waiting: list[WaitingWork]
) -> dict[str, int]:
    """How many of `waiting` each pool holds back (a scope's limit counts in no pool)."""
    counts: dict[str, int] = {}
    for item in waiting:
        work = projection.works.get(item.work)
        if work is None or item.code not in CAPACITY_CODES:
            continue
        try:
            pool = configuration.pinned_for(work.binding, work.grants).registration.pool
        except RotaError:
            continue
        counts[pool] = counts.get(pool, 0) + 1
    return counts


def capacity_view(
    projection: SchedulerProjection,
    configuration: Configuration,
    now: datetime,
    last_pass: list[Waiting] | None = None,
) -> CapacityView:
    """Per pool its limit (0: unbounded), in_use, waiting and preview; who waits and why.
    The pools are `agents`, `jobs`, every pool named in `pool_limits` or declared by a
    registered executor, and any pool the log holds slots in.

    `waiting` is `last_pass`, what the daemon's last start pass held back (None or empty:
    no pass yet, or none runs in this process); `preview` comes from a dry run of
    admission over the ready Work at `now` (nothing is written), true in any process.
    Both are counted by pool (and by concurrency key) at the projection as it stands.
    """
    settings = configuration.settings
    declared = (r.pool for r in configuration.registrations.values())
    pools = {"agents", "jobs", *projection.slots, *settings.pool_limits, *declared}
    ready = projection.ready_order()
    plan = dry_run_starts(projection, configuration, now, ready)
    preview = waiting_works(plan.waiting)
    waiting = waiting_works(last_pass or [])
    keys, buckets, paused = flow_capacity(projection, now, ready, waiting, preview)
    by_pool = waiting_by_pool(projection, configuration, waiting)
    preview_by_pool = waiting_by_pool(projection, configuration, preview)
    return CapacityView(
        pools={
            pool: PoolUse(
                limit=settings.pool_limit(pool),
                in_use=projection.in_use(pool),
                waiting=by_pool.get(pool, 0),
                preview=preview_by_pool.get(pool, 0),
            )
            for pool in sorted(pools)
        },
        scopes={
            scope: ScopeUse(limit=limit, in_use=projection.scope_in_use([scope])[scope])
            for scope, limit in sorted(settings.scope_limits.items())
        },
        waiting=waiting,
        preview=preview,
        keys=keys,
        buckets=buckets,
        paused=paused,
    )


def waiting_works(waiting: list[Waiting]) -> list[WaitingWork]:
    return [WaitingWork(work=w.work_id, code=w.code, detail=w.detail) for w in waiting]


class CapacityQueries:
    """Capacity now: `waiting` by this host's last start pass, `preview` by a dry run."""

    def __init__(self, service: SchedulerService, host: Host) -> None:
        self.service = service
        self.host = host

    def current(self) -> CapacityView:
        """Caught up to the log head (`in_use` is what the log says now), with the waiting
        of this host's last start pass (none after a restart until its first pass, and
        none in a process that runs no pass) and a dry run's `preview`."""
        service = self.service
        with service.lock:
            service.catch_up()
            return capacity_view(
                service.projection, service.configuration, service.now(), self.host.last_waiting
            )


__all__ = [
    "CAPACITY_CODES",
    "CapacityDict",
    "CapacityQueries",
    "CapacityView",
    "PoolUse",
    "ScopeUse",
    "WaitingWork",
    "capacity_view",
    "dry_run_starts",
    "waiting_by_pool",
]
