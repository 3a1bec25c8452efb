"""`GET /v1/capacity`, `/v1/scheduler`, `/v1/holds` (the needs-you list), `/v1/audit/head`,
and the Merkle proofs `/v1/audit/inclusion` and `/v1/audit/consistency`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from fastapi import APIRouter, Depends, Query

from rota.daemon import CADENCE_SECONDS
from rota.domain.errors import RotaError
from rota.http.context import ApiContext
from rota.http.deps import READ, context
from rota.http.models import (
    GUARDED,
    AuditHead,
    Capacity,
    ConsistencyProof,
    Hold,
    Holds,
    InclusionProof,
    PoolCapacity,
    SchedulerState,
    documented,
)
from rota.http.models import READ as READ_STATUSES
from rota.replay import checkpoint as checkpoints
from rota.replay import proofs
from rota.replay.errors import ReplayCode

router = APIRouter(prefix="/v1", tags=["scheduler"])
# What clears a hold, by its kind: the route an operator calls.
CLEARS = {
    "gate": "POST /v1/work/{id}/settle-gate (admin; the gate's registration decides)",
    "budget": "POST /v1/work/{id}/release",
    "crash_loop": "POST /v1/work/{id}/release",
    "recovery_exhausted": "POST /v1/work/{id}/release",
    "operator": "POST /v1/work/{id}/release",
}


@router.get("/capacity", responses=documented(*GUARDED, 503), dependencies=[READ])
def capacity(api: Annotated[ApiContext, Depends(context)]) -> Capacity:
    """Each pool's limit (0: unbounded), `in_use` (read from storage on this request),
    `waiting`: the ready Work the daemon's last start pass held back for that pool (0 after
    a restart until the first pass; `rota serve` runs no pass, so always 0 there), and
    `preview`: what a dry run of admission now holds back. Work held back by a scope limit
    counts in no pool. Flow control: `keys` (each limited concurrency key in use or holding
    Work back), `buckets` (each rate bucket: its rate, burst, tokens now, next token due)
    and `paused` (the paused pools, keys and scopes)."""
    # Caught up: in_use is what the log says now.
    view = api.scheduler.queries.capacity.current()
    shown = msgspec.to_builtins(view)
    source: Literal["last_pass", "none"] = "none" if api.read_only else "last_pass"
    return Capacity(
        pools={pool: PoolCapacity(**numbers) for pool, numbers in shown["pools"].items()},
        scopes=shown["scopes"],
        keys=shown["keys"],
        buckets=shown["buckets"],
        paused=shown["paused"],
        waiting=shown["waiting"],
        preview=shown["preview"],
        waiting_from=source,
    )


@router.get("/scheduler", responses=documented(*GUARDED, 503), dependencies=[READ])
def scheduler_state(api: Annotated[ApiContext, Depends(context)]) -> SchedulerState:
    """The cadence: whether the loop runs here, its last pass (when, how long, what it
    did), the leases this process holds, and how far the projection lags the log."""
    scheduler = api.scheduler
    state, daemon = scheduler.queries.state, scheduler.daemon
    head = scheduler.store.head().position
    applied = state.applied()
    passes = daemon.passes
    report = passes.last_report
    loop: Literal["running", "stopped", "none"] = (
        "running" if daemon.running else ("none" if api.read_only else "stopped")
    )
    return SchedulerState(
        owner=state.owner(),
        loop=loop,
        cadence_seconds=CADENCE_SECONDS,
        last_pass_at=passes.last_wall,
        last_pass_seconds=passes.last_seconds,
        passes=passes.passes,
        failed_passes=passes.failed,
        leases_held=state.leases_held(),
        position=head,
        applied=applied,
        lag=max(0, head - applied),
        last_report=None if report is None else _report(report),
    )


def _report(report: Any) -> dict[str, Any]:
    fields = ("fired", "finished", "timed_out", "renewed", "lost", "started", "recovered")
    out: dict[str, Any] = {name: getattr(report, name) for name in fields}
    out.update(relaunched=report.relaunched, settled=report.settled, errors=report.errors)
    return out


@router.get("/holds", responses=documented(*GUARDED, 503), dependencies=[READ])
def holds(api: Annotated[ApiContext, Depends(context)]) -> Holds:
    """The needs-you list: every hold on a Work (budget, gate, crash loop, operator), with
    its reason and the route that clears it, oldest first."""
    found = [
        Hold(
            work=hold.work,
            kind=hold.kind,
            reason=hold.reason,
            holder=hold.holder,
            position=hold.position,
            clears=CLEARS.get(hold.kind, "POST /v1/work/{id}/cancel").replace("{id}", hold.work),
        )
        for hold in api.scheduler.queries.works.holds()
    ]
    return Holds(holds=found)


@router.get("/audit/head", responses=documented(*GUARDED, 503), dependencies=[READ])
def audit_head(api: Annotated[ApiContext, Depends(context)]) -> AuditHead:
    """The log's head (position and chain hash) and this store's newest audit checkpoint
    in `[audit] checkpoint_dir` (null when none is configured or written yet), with its
    Merkle root at its position (the tree's size)."""
    store = api.scheduler.store
    head = store.head()
    directory = api.scheduler.config.audit.checkpoint_dir
    newest = checkpoints.latest(directory, store.store_id) if directory else None
    checkpoint = None
    if newest is not None:
        checkpoint = {
            "position": newest.position,
            "head_hash": newest.head_hash,
            "written_at": newest.written_at,
            "signed": newest.signature is not None,
            "root": newest.root,  # its Merkle root (hex; null for an old JSON checkpoint)
        }
    return AuditHead(position=head.position, hash=head.hash, checkpoint=checkpoint)


def _checkpoint_dir(api: ApiContext) -> str:
    directory = api.scheduler.config.audit.checkpoint_dir
    if not directory:
        raise RotaError(
            "no [audit] checkpoint_dir is configured: proofs are made against its checkpoints",
            code=ReplayCode.NO_COVERING_CHECKPOINT,
        )
    return str(directory)


@router.get("/audit/inclusion", responses=documented(*READ_STATUSES, 409), dependencies=[READ])
def audit_inclusion(
    api: Annotated[ApiContext, Depends(context)],
    position: Annotated[int, Query(ge=1, le=2**62, description="the event's log position")],
) -> InclusionProof:
    """An inclusion proof (`rota-inclusion/1`) of the event at `position` against the newest
    checkpoint of `[audit] checkpoint_dir` that covers it, as `rota audit prove --json`;
    409 `no_covering_checkpoint` when there is none (`rota audit checkpoint` writes one)."""
    store = api.scheduler.store
    checkpoint = proofs.covering(_checkpoint_dir(api), store, position)
    return InclusionProof(**proofs.inclusion(store, position, checkpoint))


@router.get("/audit/consistency", responses=documented(*READ_STATUSES, 409), dependencies=[READ])
def audit_consistency(
    api: Annotated[ApiContext, Depends(context)],
    old: Annotated[int, Query(ge=1, le=2**62, description="size of the older checkpoint")],
    new: Annotated[int, Query(ge=1, le=2**62, description="size of the newer checkpoint")],
) -> ConsistencyProof:
    """A consistency proof (`rota-consistency/1`) between this store's checkpoints of sizes
    `old` and `new` in `[audit] checkpoint_dir`, as `rota audit consistency OLD NEW --json`;
    409 `no_covering_checkpoint` when either is missing."""
    store, directory = api.scheduler.store, _checkpoint_dir(api)
    older = proofs.at_size(directory, store, old)
    newer = proofs.at_size(directory, store, new)
    return ConsistencyProof(**proofs.consistency(store, older, newer))
