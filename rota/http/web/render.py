"""The web view's rendering: the Jinja environment over `rota/http/web/templates/`, the security
headers of every page, and the helpers each page uses to find its session or refuse.

Every answer of the web view carries a Content-Security-Policy that allows no script and
no inline style (the stylesheet is `/ui/static/web.css`, bars are SVG attributes), frames
nothing, and posts forms only to this origin; pages are never cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from rota.application.timestamps import parse_timestamp
from rota.domain.errors import ErrorCode
from rota.http.context import ApiContext
from rota.http.web.session import NOTICE_COOKIE, PATH, Session, Sessions

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make a form's Origin "null"
    "Cache-Control": "no-store",
}


REFRESH_COOKIE = "rota_refresh"
REFRESH_CHOICES = (0, 10, 30, 60, 300)  # seconds; 0: off
DEFAULT_REFRESH = 30
NO_REFRESH = frozenset({"sign_in.html", "error.html"})


def refresh_seconds(request: Request) -> int:
    """The page's auto-refresh period: the `rota_refresh` cookie's, else the default."""
    try:
        chosen = int(request.cookies.get(REFRESH_COOKIE, DEFAULT_REFRESH))
    except ValueError:
        return DEFAULT_REFRESH
    return chosen if chosen in REFRESH_CHOICES else DEFAULT_REFRESH


def _when(text: Any) -> str:
    """A log timestamp as `2026-10-01 09:01:01` (UTC), for people."""
    if not text:
        return ""
    when = parse_timestamp(str(text)) if not isinstance(text, datetime) else text
    return when.strftime("%Y-%m-%d %H:%M:%S")


def _seconds(value: Any) -> str:
    """A duration in words: `42 s`, `3 min 5 s`, `2 h 10 min`."""
    seconds = float(value)
    if seconds < 60:
        return (
            f"{seconds:.0f} s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f} s"
        )
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("rota.http.web", "templates"),
    autoescape=jinja2.select_autoescape(("html",)),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["when"] = _when
ENV.filters["seconds"] = _seconds
ENV.filters["number"] = lambda value: f"{float(value):g}"
ENV.filters["url"] = lambda value: quote(str(value), safe="")


@dataclass
class WebState:
    """The web view's state on the app (`app.state.web`): its session signer."""

    sessions: Sessions


def web(request: Request) -> WebState:
    state: WebState = request.app.state.web
    return state


def api(request: Request) -> ApiContext:
    state: ApiContext = request.app.state.rota
    return state


def safe_next(value: str | None, default: str = f"{PATH}/") -> str:
    """A redirect target inside the web view only (never another host or scheme)."""
    if value and value.startswith(f"{PATH}/") and not value.startswith("//") and "\\" not in value:
        return value
    return default


def attention(context: ApiContext) -> int:
    """What needs a person: the holds, and the Works failed for good (the nav's badge)."""
    counts = context.scheduler.queries.works.counts()
    failed = sum(n for (state, _), n in counts.states.items() if state == "failed")
    return sum(counts.holds.values()) + failed


def render(
    request: Request,
    template: str,
    session: Session | None,
    *,
    status: int = 200,
    page: str = "",
    **values: Any,
) -> HTMLResponse:
    """The page `template` with what every page shows (who is signed in, what they may do,
    the notice the last action left, how much needs them, whether it refreshes itself),
    and the security headers."""
    context = api(request)
    notice = web(request).sessions.notice(request)
    can_operate = session is not None and session.operate and not context.read_only
    body = ENV.get_template(template).render(
        session=session,
        can_operate=can_operate,
        can_admin=can_operate and session is not None and session.admin,
        read_only=context.read_only,
        notice=notice,
        page=page,
        here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        attention=0 if session is None else attention(context),
        refresh=0
        if session is None or status != 200 or template in NO_REFRESH
        else refresh_seconds(request),
        refresh_choices=REFRESH_CHOICES,
        **values,
    )
    response = HTMLResponse(body, status_code=status, headers=HEADERS)
    if notice is not None:
        response.delete_cookie(NOTICE_COOKIE, path=PATH)
    return response


def refuse(
    request: Request, session: Session | None, status: int, code: ErrorCode | str, message: str
) -> HTMLResponse:
    """An error page: `rota: <code>: <message>`, with its status."""
    return render(request, "error.html", session, status=status, code=str(code), message=message)


def to_sign_in(request: Request) -> RedirectResponse:
    where = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PATH}/sign-in?next={quote(where, safe='')}", 303, headers=HEADERS)


def signed_in(request: Request) -> Session | Response:
    """The page's session, or the redirect to the sign-in form."""
    session = web(request).sessions.session(request)
    return to_sign_in(request) if session is None else session
