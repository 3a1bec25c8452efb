"""The web view's pages (GET, a `read` session): Overview, Needs you (holds, and Work failed
for good), Works (by latest activity or id, with an id search), a Work with why it failed,
the schedule fires that fed it, its attempt timeline and explanation, Capacity and
budgets, Schedules and a schedule, Audit; and sign-in. The event browser and the charts
are in `browse`.

Every page is server-rendered HTML that needs no script. Without a session a page answers
a redirect to the sign-in form (and back once signed in).
"""

from __future__ import annotations

import secrets
from importlib import resources
from urllib.parse import quote

import msgspec
from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from rota.domain.errors import DomainCode, RotaError
from rota.http.errors import status_of
from rota.http.models import PAGE_DEFAULT, PAGE_MAX
from rota.http.routes import system
from rota.http.web import views
from rota.http.web.render import HEADERS, api, refuse, render, safe_next, signed_in, web
from rota.http.web.session import PATH
from rota.http.web.timeline import timeline
from rota.replay.explain import explain

router = APIRouter(prefix=PATH, include_in_schema=False)
STYLESHEET = resources.files("rota.http.web").joinpath("static", "web.css")


@router.get("")
def root() -> RedirectResponse:
    return RedirectResponse(f"{PATH}/", 303)


@router.get("/static/web.css")
def stylesheet() -> Response:
    """The stylesheet: public (it holds nothing of the store), so the sign-in page has it."""
    headers = {**HEADERS, "Cache-Control": "max-age=300"}
    return Response(STYLESHEET.read_bytes(), media_type="text/css", headers=headers)


@router.get("/sign-in")
def sign_in_form(request: Request, next: str | None = None) -> Response:
    session = web(request).sessions.session(request)
    if session is not None:
        return RedirectResponse(safe_next(next), 303)
    sessions = web(request).sessions
    csrf = sessions.signin_csrf(request)  # double-submit: in the form and in its cookie
    response = render(
        request, "sign_in.html", None, page="sign-in", next=safe_next(next), csrf=csrf
    )
    sessions.set_signin_csrf(request, response, csrf)
    return response


@router.get("/")
def overview(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    return render(
        request, "overview.html", session, page="overview", **views.overview(api(request))
    )


@router.get("/needs-you")
def needs_you(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    failed, failed_count = api(request).scheduler.queries.activity.failed()
    return render(
        request,
        "needs_you.html",
        session,
        page="needs-you",
        holds=views.needs_you(api(request)),
        failed=failed,
        failed_count=failed_count,
    )


@router.get("/works")
def works(
    request: Request,
    state: str = "",
    scope: str = Query("", max_length=200),
    binding: str = Query("", max_length=64),
    q: str = Query("", max_length=200),
    sort: str = "recent",
    after: str = Query("", max_length=200),
    before: int | None = Query(None, ge=1),
    limit: int = Query(PAGE_DEFAULT, ge=1, le=PAGE_MAX),
) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    if state and state not in views.STATES:
        state = ""
    search, order = q.strip(), "id" if sort == "id" else "recent"
    scheduler = api(request).scheduler
    if search and scheduler.queries.works.work(search) is not None and not (after or before):
        return RedirectResponse(f"{PATH}/work/{quote(search, safe='')}", 303, headers=HEADERS)
    found = views.works_list(
        scheduler,
        state=state,
        scope=scope,
        binding=binding,
        search=search,
        sort=order,
        after=after,
        before=before,
        limit=limit,
    )
    return render(
        request,
        "works.html",
        session,
        page="works",
        **found,
        filters={
            "state": state,
            "scope": scope,
            "binding": binding,
            "q": search,
            "sort": order,
            "limit": limit,
        },
        paged=bool(after or before),
        states=views.STATES,
    )


@router.get("/work/{work_id}")
def work(request: Request, work_id: str) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    scheduler = api(request).scheduler
    found_view = scheduler.work(work_id)
    if found_view is None:
        return refuse(
            request, session, 404, DomainCode.UNKNOWN_WORK, f"no Work {work_id!r} in this store"
        )
    view = msgspec.to_builtins(found_view)
    why = explain(scheduler.store, work_id, service=scheduler.service)
    activity = scheduler.queries.activity
    bars = timeline(view, activity.stream(work_id), views.now(scheduler))
    gates = [h for h in view["holds"] if h["kind"] == "gate"]
    return render(
        request,
        "work.html",
        session,
        page="works",
        work=view,
        explain=why,
        timeline=bars,
        gates=gates,
        failure=views.failure(view),
        fires=activity.fires(work_id)[-views.FIRES_SHOWN :],
    )


@router.get("/capacity")
def capacity(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    context = api(request)
    return render(
        request,
        "capacity.html",
        session,
        page="capacity",
        capacity=system.capacity(context),
        ledgers=views.ledgers(context.scheduler),
    )


@router.get("/schedules")
def schedules(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    rows = views.schedule_rows(api(request).scheduler)
    return render(
        request, "schedules.html", session, page="schedules", schedules=rows, trigger_key=_key()
    )


@router.get("/schedules/{name}")
def schedule(request: Request, name: str) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    try:
        detail = views.schedule_detail(api(request).scheduler, name)
    except RotaError as exc:
        return refuse(request, session, status_of(exc), exc.code, str(exc))
    return render(request, "schedule.html", session, page="schedules", trigger_key=_key(), **detail)


def _key() -> str:
    """A trigger form's key, drawn per page: the same form sent twice fires once."""
    return f"web-{secrets.token_hex(8)}"


@router.get("/audit")
def audit(request: Request) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    return render(request, "audit.html", session, page="audit", **views.audit(api(request)))
