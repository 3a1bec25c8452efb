"""The web view's forms (POST, then a redirect): sign in and out, the actions that clear
a hold or settle a Work (release, settle a gate, retry, cancel), and a schedule's pause,
resume and trigger.

Each action checks, in order: a session (`sign_in_required`), the form's CSRF token and
that it came from this origin (`csrf_invalid`), that this is not `rota serve`
(`serve_read_only`), the token's scope (`operate`; `admin` to settle a gate, as the API);
only then does it run the command, as the token's name. A refused command (`not_held`,
`work_terminal` ...) comes back as a notice on the page the form was on.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from rota.domain.errors import RotaError
from rota.http.errors import HttpCode
from rota.http.guard import host_name
from rota.http.tokens import Scope
from rota.http.web.errors import WebCode
from rota.http.web.render import HEADERS, api, refuse, render, safe_next, web
from rota.http.web.session import PATH, Session

router = APIRouter(prefix=PATH, include_in_schema=False)
FORM = "application/x-www-form-urlencoded"
MAX_FIELD = 1000


async def _form(request: Request) -> dict[str, str] | None:
    """The urlencoded form (first value of each field), or None if it is not one."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != FORM:
        return None
    fields = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0][:MAX_FIELD] for k, v in fields.items() if v}


def _same_origin(request: Request) -> bool:
    """Whether the browser says the form came from this origin (when it says anything)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    parts = urlsplit(origin)
    return parts.netloc.lower() == request.headers.get("host", "").lower() and bool(
        host_name(parts.netloc)
    )


def _back(request: Request, form: dict[str, str], kind: str, text: str) -> RedirectResponse:
    response = RedirectResponse(safe_next(form.get("next")), 303, headers=HEADERS)
    web(request).sessions.notify(response, request, kind, text)
    return response


async def _act(
    request: Request,
    needs: Scope,
    act: Callable[[Session, dict[str, str]], str],
) -> Response:
    """Check the session, the CSRF token, the origin, the mode and the scope, then run
    `act(session, form)` (it answers what it did) off the event loop, and redirect back."""
    sessions = web(request).sessions
    session = sessions.session(request)
    if session is None:
        return refuse(request, None, 401, WebCode.SIGN_IN_REQUIRED, "sign in to act")
    form = await _form(request)
    if form is None:
        return refuse(
            request, session, 415, HttpCode.UNSUPPORTED_MEDIA_TYPE, f"a form is sent as {FORM}"
        )
    if not sessions.csrf_ok(session, form.get("csrf")) or not _same_origin(request):
        message = "the form's CSRF token is missing or not this session's: nothing was done"
        return refuse(request, session, 403, WebCode.CSRF_INVALID, message)
    if api(request).read_only:
        message = "rota serve is read-only: act through a daemon (rota run --http)"
        return refuse(request, session, 403, HttpCode.SERVE_READ_ONLY, message)
    if not session.token.allows(needs):
        message = f"token {session.name!r} lacks the {needs} scope"
        return refuse(request, session, 403, HttpCode.MISSING_SCOPE, message)
    try:
        done = await run_in_threadpool(act, session, form)
    except RotaError as exc:
        return _back(request, form, "refused", f"{exc.code}: {exc}")
    return _back(request, form, "done", done)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    sessions = web(request).sessions
    form = await _form(request)
    if form is None:
        return refuse(
            request, None, 415, HttpCode.UNSUPPORTED_MEDIA_TYPE, f"a form is sent as {FORM}"
        )
    target = safe_next(form.get("next"))
    if not sessions.signin_csrf_ok(request, form.get("csrf")) or not _same_origin(request):
        message = "the sign-in form's CSRF token is missing or stale: reload it"
        return refuse(request, None, 403, WebCode.CSRF_INVALID, message)
    response = RedirectResponse(target, 303, headers=HEADERS)
    if sessions.sign_in(form.get("token", "").strip(), response, request) is None:
        csrf = form.get("csrf", "")
        failed = render(
            request,
            "sign_in.html",
            None,
            status=401,
            page="sign-in",
            next=target,
            csrf=csrf,
            failed=f"{WebCode.SIGN_IN_FAILED}: the token file does not know that token",
        )
        return failed
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    sessions = web(request).sessions
    session = sessions.session(request)
    form = await _form(request) or {}
    if session is not None and not sessions.csrf_ok(session, form.get("csrf")):
        return refuse(request, session, 403, WebCode.CSRF_INVALID, "reload the page to sign out")
    response = RedirectResponse(f"{PATH}/sign-in", 303, headers=HEADERS)
    sessions.sign_out(response)
    return response


@router.post("/work/{work_id}/release")
async def release(request: Request, work_id: str) -> Response:
    def act(session: Session, form: dict[str, str]) -> str:
        kind = form.get("kind") or None
        api(request).scheduler.release(work_id, kind=kind, by=session.name)
        return f"released the {kind or 'hold'} hold of {work_id}"

    return await _act(request, "operate", act)


@router.post("/work/{work_id}/settle-gate")
async def settle_gate(request: Request, work_id: str) -> Response:
    def act(session: Session, form: dict[str, str]) -> str:
        admit = form.get("decision") == "admit"
        registration = form.get("registration", "")
        reason = form.get("reason", "") or f"settled in the web view by {session.name}"
        api(request).scheduler.settle_gate(work_id, registration, admit=admit, reason=reason)
        return f"{'admitted' if admit else 'refused'} {work_id} at gate {registration}"

    return await _act(request, "admin", act)


@router.post("/work/{work_id}/retry")
async def retry(request: Request, work_id: str) -> Response:
    def act(session: Session, form: dict[str, str]) -> str:
        reason = form.get("reason", "")
        api(request).scheduler.retry(work_id, reason=reason, requested_by=session.name)
        return f"asked for a retry of {work_id}"

    return await _act(request, "operate", act)


@router.post("/work/{work_id}/cancel")
async def cancel(request: Request, work_id: str) -> Response:
    def act(session: Session, form: dict[str, str]) -> str:
        reason = form.get("reason", "") or f"cancelled in the web view by {session.name}"
        api(request).scheduler.cancel(work_id, reason=reason, by=session.name)
        return f"cancelled {work_id}"

    return await _act(request, "operate", act)


@router.post("/schedules/{name}/pause")
async def pause_schedule(request: Request, name: str) -> Response:
    def act(session: Session, form: dict[str, str]) -> str:
        reason = form.get("reason", "") or f"paused in the web view by {session.name}"
        api(request).scheduler.schedules.pause(name, actor=session.name, reason=reason)
        return f"paused schedule {name}"

    return await _act(request, "operate", act)


@router.post("/schedules/{name}/resume")
async def resume_schedule(request: Request, name: str) -> Response:
    def act(session: Session, form: dict[str, str]) -> str:
        reason = form.get("reason", "") or f"resumed in the web view by {session.name}"
        api(request).scheduler.schedules.resume(name, actor=session.name, reason=reason)
        return f"resumed schedule {name}"

    return await _act(request, "operate", act)


@router.post("/schedules/{name}/trigger")
async def trigger_schedule(request: Request, name: str) -> Response:
    """Fire now; the form's `key` (drawn when the page was rendered) is the fire's key, so
    a form sent twice fires once."""

    def act(session: Session, form: dict[str, str]) -> str:
        key = form.get("key") or None
        fired = api(request).scheduler.schedules.trigger_now(name, key=key, actor=session.name)
        if fired is None:
            return f"schedule {name} was already triggered by this form"
        return f"triggered schedule {name} ({fired.identity})"

    return await _act(request, "operate", act)
