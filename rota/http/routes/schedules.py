"""`GET /v1/schedules` (paged), `GET /v1/schedules/{name}` (definition, next fires, recent
history, quarantine) and the schedule mutations: pause, resume, trigger.

The reads are the facade's (`scheduler.schedules`, over
`rota.application.queries.schedule_reads`), so the API, the CLI and the web view say the
same. The mutations go through `rota.http.routes.mutations.once` (an `Idempotency-Key`);
pause and resume record the token's name as the actor (a repeat is a no-op: already so);
a trigger's key is its request id and its fire's key (`schedule/<name>/manual/<key>`), so
a repeat fires nothing and answers with the first fire, across restarts too.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from fastapi import APIRouter, Depends, Path, Query

from rota.application.queries.schedule_views import TriggeredFire
from rota.http.context import ApiContext
from rota.http.deps import READ, context
from rota.http.models import (
    MUTATION,
    PAGE_DEFAULT,
    PAGE_MAX,
    SCHEDULE_NAME,
    Empty,
    ReasonBody,
    ScheduleAccepted,
    ScheduleDetail,
    SchedulePage,
    documented,
)
from rota.http.models import READ as READ_ERRORS
from rota.http.routes.mutations import Api, KeyHeader, Operator, once

router = APIRouter(prefix="/v1", tags=["schedules"])
Name = Annotated[str, Path(pattern=SCHEDULE_NAME)]
HISTORY = 20  # the recent nominal times a detail shows
NEXT = 10


def release_hint(name: str, shown: dict[str, Any]) -> str | None:
    """How to release a quarantined schedule (docs/schedules.md), or None."""
    if not shown.get("quarantined"):
        return None
    return (
        f"fix the cause, then redefine it (`rota schedule apply`) or resume it "
        f"(POST /v1/schedules/{name}/resume, `rota schedule resume {name}`)"
    )


@router.get("/schedules", responses=documented(*READ_ERRORS), dependencies=[READ])
def schedules(
    api: Annotated[ApiContext, Depends(context)],
    after: Annotated[
        str | None, Query(max_length=200, description="the `next` of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
) -> SchedulePage:
    """The schedules by name, `limit` a page (default 16, at most 64): state, version,
    spec, boundary, fired and skipped counts, last fire. `next` is the last name of this
    page when there is more, else null."""
    rows = [
        msgspec.to_builtins(r)
        for r in api.scheduler.schedules.list()
        if after is None or r.name > after
    ]
    page = rows[:limit]
    return SchedulePage(schedules=page, next=page[-1]["name"] if len(rows) > limit else None)


@router.get("/schedules/{name}", responses=documented(*READ_ERRORS, 404), dependencies=[READ])
def schedule(api: Annotated[ApiContext, Depends(context)], name: Name) -> ScheduleDetail:
    """One schedule: its definition and versions, state, boundary, the next nominal times
    (due with jitter, DST flag), the recent history (fired with the Work and its outcome,
    skipped with the reason) and, when quarantined, how to release it."""
    facade = api.scheduler.schedules
    shown = msgspec.to_builtins(facade.show(name))
    return ScheduleDetail(
        schedule=shown,
        next=msgspec.to_builtins(facade.next(name, NEXT)),
        history=msgspec.to_builtins(facade.history(name, limit=HISTORY)),
        release=release_hint(name, shown),
    )


def _answer(api: ApiContext, name: str, fired: TriggeredFire | None = None) -> ScheduleAccepted:
    scheduler = api.scheduler
    return ScheduleAccepted(
        schedule=msgspec.to_builtins(scheduler.schedules.show(name)),
        fired=fired.identity if fired else None,
        repeated=fired.repeated if fired else False,
        position=fired.position if fired else scheduler.store.head().position,
    )


@router.post("/schedules/{name}/pause", responses=documented(*MUTATION))
def pause(
    api: Api, token: Operator, name: Name, body: ReasonBody, key: KeyHeader = None
) -> ScheduleAccepted:
    """Pause a schedule (`core.schedule.paused`, the token's name as actor): its nominal
    times are skipped with reason `paused` until it is resumed."""

    def act(key: str) -> ScheduleAccepted:
        api.scheduler.schedules.pause(name, actor=token.name, reason=body.reason)
        return _answer(api, name)

    return once(api, key, act)


@router.post("/schedules/{name}/resume", responses=documented(*MUTATION))
def resume(
    api: Api, token: Operator, name: Name, body: ReasonBody, key: KeyHeader = None
) -> ScheduleAccepted:
    """Resume a paused schedule, or release a quarantined one once its cause is fixed
    (`core.schedule.resumed`, the token's name as actor)."""

    def act(key: str) -> ScheduleAccepted:
        api.scheduler.schedules.resume(name, actor=token.name, reason=body.reason)
        return _answer(api, name)

    return once(api, key, act)


@router.post("/schedules/{name}/trigger", responses=documented(*MUTATION))
def trigger(
    api: Api, token: Operator, name: Name, body: Empty, key: KeyHeader = None
) -> ScheduleAccepted:
    """Fire the schedule now, outside its nominal times. The key is the request id and the
    fire's key (`schedule/<name>/manual/<key>`): a repeat fires nothing and answers with
    the first fire (`repeated` true)."""

    def act(key: str) -> ScheduleAccepted:
        fired = api.scheduler.schedules.trigger_now(name, actor=token.name, request_id=key)
        return _answer(api, name, fired)

    return once(api, key, act)
