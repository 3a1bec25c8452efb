"""Flow control of an operator: `GET /v1/pauses`, `POST /v1/pauses` (pause a pool, a key
or a scope), `DELETE /v1/pauses/{target}/{name}` (resume it) and
`POST /v1/work/{work_id}/priority`.

The mutations go through `rota.http.routes.mutations.once`: an `Idempotency-Key` is
required and recorded as the request id (`request/<key>`), so a repeat appends nothing and
answers the first receipt; the token's name is recorded as who acted. Pausing what is
paused, or giving a Work its own priority, appends nothing (`request.repeated` true);
resuming what is not paused is `409 not_paused`. A pause deletes and re-queues nothing: the
ready Work it covers waits with `flow_paused` until the resume.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from fastapi import APIRouter, Path

from rota.application.commands.requests import Receipt
from rota.http.deps import READ
from rota.http.models import (
    GUARDED,
    MUTATION,
    Accepted,
    PauseBody,
    Pauses,
    PriorityBody,
    documented,
)
from rota.http.routes.mutations import Api, KeyHeader, Operator, WorkId, _mutate, once

router = APIRouter(prefix="/v1", tags=["flow"])
Target = Annotated[str, Path(pattern="^(pool|key|scope)$", description="pool, key or scope")]
Name = Annotated[
    str,
    Path(
        max_length=200,
        description="the pool's, key's or scope's name (a scope's slashes as they are: "
        "/v1/pauses/scope/root/batch)",
    ),
]


def _pauses(api: Api, done: Receipt | None = None) -> Pauses:
    paused = msgspec.to_builtins(api.scheduler.flow.paused())
    if done is None:
        return Pauses(paused=paused)
    return Pauses(paused=paused, position=done.position, request=msgspec.to_builtins(done))


@router.get("/pauses", responses=documented(*GUARDED, 503), dependencies=[READ])
def pauses(api: Api) -> Pauses:
    """The pauses in force: target, name, reason, who paused it, and the log position and
    time of the event that paused it."""
    return _pauses(api)


@router.post("/pauses", responses=documented(*MUTATION))
def pause(api: Api, token: Operator, body: PauseBody, key: KeyHeader = None) -> Pauses:
    """Pause a pool, a key (only Work carrying it) or a scope (and the scopes below it):
    `core.flow.paused`. Its ready Work waits (`flow_paused`); running attempts go on."""

    def act(key: str) -> Pauses:
        done = api.scheduler.flow.pause(
            body.target, body.name, reason=body.reason, by=token.name, request_id=key
        )
        return _pauses(api, done)

    return once(api, key, act)


@router.delete("/pauses/{target}/{name:path}", responses=documented(*MUTATION))
def resume(api: Api, token: Operator, target: Target, name: Name, key: KeyHeader = None) -> Pauses:
    """Resume a paused pool, key or scope (`core.flow.resumed`): its Work starts at the
    next pass. Not paused: `409 not_paused`. No body is needed."""

    def act(key: str) -> Pauses:
        done = api.scheduler.flow.resume(target, name, by=token.name, request_id=key)
        return _pauses(api, done)

    return once(api, key, act)


@router.post("/work/{work_id}/priority", responses=documented(*MUTATION))
def priority(
    api: Api, token: Operator, work_id: WorkId, body: PriorityBody, key: KeyHeader = None
) -> Accepted:
    """Give a Work that is not finished a new priority (`core.work.reprioritized`; higher
    starts first, -1000 to 1000): admission orders by it from the next pass on."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.flow.reprioritize(
            work_id, body.priority, reason=body.reason, by=token.name, request_id=key
        ),
    )
