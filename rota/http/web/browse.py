"""The web view's pages for looking around: the event browser (the log newest first, a page
at a time, filtered by stream and type), the charts over time (throughput, failures,
latency by binding, drawn as SVG by `charts`), and the auto-refresh switch.

Auto-refresh is a `<meta http-equiv="refresh">` in every signed-in page (no script): on by
default every `DEFAULT_REFRESH` seconds, set or turned off by following a link to
`/ui/refresh?every=N`, which keeps the choice in the `rota_refresh` cookie and goes back.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from rota.http.web import charts
from rota.http.web.render import (
    HEADERS,
    REFRESH_CHOICES,
    REFRESH_COOKIE,
    api,
    render,
    safe_next,
    signed_in,
)
from rota.http.web.session import PATH
from rota.http.web.views import now

router = APIRouter(prefix=PATH, include_in_schema=False)
EVENTS_DEFAULT, EVENTS_MAX = 50, 200
WINDOWS = {1: 12, 6: 24, 24: 24, 168: 28}  # hours shown -> buckets


@router.get("/events")
def events(
    request: Request,
    stream: str = Query("", max_length=300),
    type: str = Query("", max_length=120),
    before: int | None = Query(None, ge=1),
    limit: int = Query(EVENTS_DEFAULT, ge=1, le=EVENTS_MAX),
) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    stream, type = stream.strip(), type.strip()
    found = api(request).scheduler.queries.activity.events_page(
        before=before, limit=limit, stream=stream or None, type=type or None
    )
    return render(
        request,
        "events.html",
        session,
        page="events",
        found=found,
        filters={"stream": stream, "type": type, "limit": limit},
        paged=before is not None,
    )


@router.get("/charts")
def charts_page(request: Request, hours: int = 24) -> Response:
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    if hours not in WINDOWS:
        hours = 24
    scheduler = api(request).scheduler
    series = scheduler.queries.series.over_time(now(scheduler), hours=hours, buckets=WINDOWS[hours])
    drawn = [(chart, charts.svg(chart)) for chart in charts.charts(series)]
    return render(
        request,
        "charts.html",
        session,
        page="charts",
        series=series,
        drawn=drawn,
        hours=hours,
        windows=sorted(WINDOWS),
    )


@router.get("/refresh")
def refresh(request: Request, every: int = 0, next: str | None = None) -> Response:
    """Turn auto-refresh off (`every=0`) or set its period, then go back to `next` (like
    every page, for a signed-in session only)."""
    session = signed_in(request)
    if isinstance(session, Response):
        return session
    if every not in REFRESH_CHOICES:
        every = 0
    response = RedirectResponse(safe_next(next), 303, headers=HEADERS)
    response.set_cookie(
        REFRESH_COOKIE,
        str(every),
        max_age=365 * 24 * 3600,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response
