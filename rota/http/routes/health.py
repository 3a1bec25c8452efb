"""`GET /healthz` (the daemon loop ticks) and `GET /readyz` (the store answers and takes writes, the
projections are caught up, no fast doctor check fails, no schedule is stuck or quarantined:
`rota.application.queries.schedule_health`). Both need a read token too."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends

from rota.application.errors import StoreError
from rota.application.queries.schedule_health import unhealthy
from rota.daemon import CADENCE_SECONDS
from rota.http.context import ApiContext
from rota.http.deps import READ, context
from rota.http.errors import ApiError, HttpCode
from rota.http.models import GUARDED, Health, documented
from rota.replay.log_checks import check_checkpoint
from rota.replay.state_checks import check_leases, check_timers

router = APIRouter(tags=["health"])
HEALTHY_PASSES = 3  # the loop must have ticked within this many cadences


@router.get("/healthz", responses=documented(*GUARDED, 503), dependencies=[READ])
def healthz(api: Annotated[ApiContext, Depends(context)]) -> Health:
    """200 while the daemon's loop ticked within 3 cadences (15 s); `rota serve` runs no
    loop and is healthy while it answers."""
    daemon = api.scheduler.daemon
    if api.read_only:
        return Health(status="ok", detail="rota serve: no scheduler loop here")
    last = daemon.passes.last_at
    if not daemon.running:
        raise ApiError("the scheduler loop is not running", code=HttpCode.UNHEALTHY, status=503)
    since = time.monotonic() - (last if last is not None else daemon.passes.started_at)
    if since > HEALTHY_PASSES * CADENCE_SECONDS:
        raise ApiError(
            f"the scheduler loop last ticked {since:.0f} s ago "
            f"(more than {HEALTHY_PASSES} cadences of {CADENCE_SECONDS:.0f} s)",
            code=HttpCode.UNHEALTHY,
            status=503,
        )
    return Health(status="ok", detail=f"the loop ticked {since:.1f} s ago")


@router.get("/readyz", responses=documented(*GUARDED, 503), dependencies=[READ])
def readyz(api: Annotated[ApiContext, Depends(context)]) -> Health:
    """200 when the store answers and takes writes (not read-only, not missing events
    after a failover: `log_regressed`), the scheduler projection caught up to the log head,
    none of doctor's fast checks (checkpoint, expired leases, overdue timers) fails, and no
    schedule is stuck or quarantined (doctor's `schedule_health`)."""
    scheduler = api.scheduler
    store, checkpoint_dir = scheduler.store, scheduler.config.audit.checkpoint_dir
    health = scheduler.daemon.health  # what the loop found (failover: rota.store_health)
    state = health.state if not health.writable else store.state()
    if not state.writable:
        raise ApiError(
            f"the store takes no writes: {state.code}: {state.reason}",
            code=HttpCode.NOT_READY,
            status=503,
        )
    try:
        found = scheduler.queries.state.at_head(
            lambda projection, now: [
                check_checkpoint(store, checkpoint_dir),
                check_leases(projection, now),
                check_timers(projection, now),
            ]
        )
    except StoreError as exc:
        raise ApiError(
            f"the store does not answer: {exc.code}: {exc}", code=HttpCode.NOT_READY, status=503
        ) from None
    head, applied, checks = found.head, found.applied, found.value
    if applied < head:
        raise ApiError(
            f"the projection is at {applied}, the log at {head}",
            code=HttpCode.NOT_READY,
            status=503,
        )
    failing = [f"{c.name}: {c.detail}" for c in checks if c.status == "fail"]
    try:
        schedules = unhealthy(scheduler.queries.schedules.health())
    except StoreError as exc:
        raise ApiError(
            f"the store does not answer: {exc.code}: {exc}", code=HttpCode.NOT_READY, status=503
        ) from None
    failing.extend(f"schedule_health: {h.name} {h.status} ({h.reason})" for h in schedules)
    if failing:
        raise ApiError("; ".join(failing), code=HttpCode.NOT_READY, status=503)
    return Health(status="ok", detail=f"caught up at position {head}")
