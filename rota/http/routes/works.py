"""`GET /v1/works` (filtered, paged), `GET /v1/work/{id}` (the view and its explanation) and
`GET /v1/work/{id}/artifacts` (its artifact references, typed)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from fastapi import APIRouter, Depends, Path, Query

from rota.domain.errors import DomainCode, RotaError
from rota.domain.state import WorkStateName
from rota.http.context import ApiContext
from rota.http.deps import READ, context
from rota.http.models import (
    PAGE_DEFAULT,
    PAGE_MAX,
    WORK_ID,
    ArtifactRef,
    Artifacts,
    WorkDetail,
    WorkPage,
    documented,
)
from rota.http.models import READ as READ_ERRORS
from rota.replay.explain import explain

router = APIRouter(prefix="/v1", tags=["works"])


@router.get("/works", responses=documented(*READ_ERRORS), dependencies=[READ])
def works(
    api: Annotated[ApiContext, Depends(context)],
    state: Annotated[WorkStateName | None, Query()] = None,
    scope: Annotated[
        str | None, Query(max_length=200, description="this scope and those under it")
    ] = None,
    binding: Annotated[str | None, Query(max_length=64)] = None,
    after: Annotated[
        str | None, Query(max_length=200, description="the `next` of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_DEFAULT,
) -> WorkPage:
    """The Works by id, `limit` a page (default 16, at most 64), filtered by state, scope
    (the scope and its descendants) and binding. `next` is the last id of this page when
    there is more (a page reads `limit + 1`), else null."""
    rows, cursor = api.scheduler.works_page(
        state=state, scope=scope, binding=binding, after=after, limit=limit
    )
    return WorkPage(works=[msgspec.to_builtins(w) for w in rows], next=cursor)


@router.get("/work/{work_id}", responses=documented(*READ_ERRORS, 404), dependencies=[READ])
def work(
    api: Annotated[ApiContext, Depends(context)],
    work_id: Annotated[str, Path(pattern=WORK_ID)],
) -> WorkDetail:
    """One Work: state, waiting annotation, holds (with `kind`), attempts with their
    segments and launch phases, and `explain` (why it is in its state, citing positions)."""
    scheduler = api.scheduler
    view = scheduler.work(work_id)
    if view is None:
        raise RotaError(f"no Work {work_id!r} in this store", code=DomainCode.UNKNOWN_WORK)
    why = explain(scheduler.store, work_id, service=scheduler.service)
    return WorkDetail(work=msgspec.to_builtins(view), explain=msgspec.to_builtins(why))


@router.get(
    "/work/{work_id}/artifacts", responses=documented(*READ_ERRORS, 404), dependencies=[READ]
)
def artifacts(
    api: Annotated[ApiContext, Depends(context)],
    work_id: Annotated[str, Path(pattern=WORK_ID)],
) -> Artifacts:
    """The artifact references every attempt of the Work recorded with its outcomes,
    oldest first (also in `GET /v1/work/{id}`, under each attempt's `artifacts`)."""
    view = api.scheduler.work(work_id)
    if view is None:
        raise RotaError(f"no Work {work_id!r} in this store", code=DomainCode.UNKNOWN_WORK)
    refs = [
        ArtifactRef(
            attempt=attempt.number,
            execution=attempt.execution,
            name=a.name,
            uri=a.uri,
            digest=a.digest,
            size=a.size,
        )
        for attempt in view.attempts
        for a in attempt.artifacts
    ]
    return Artifacts(work=view.id, artifacts=refs)
