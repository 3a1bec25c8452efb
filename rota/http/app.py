"""The app factory: `create_app(context)` builds the FastAPI app of the HTTP API.

The routes are the modules of `rota.http.routes` (their `ROUTERS`), each an `APIRouter`
whose routes take the `ApiContext` and the token through `rota.http.deps`. In front of
them is `rota.http.guard.Guard` (Host allow-list, body limit, JSON-only mutations); the
exception handlers here answer every error as `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rota.domain.errors import RotaError
from rota.http import web
from rota.http.context import ApiContext
from rota.http.deps import READ
from rota.http.errors import HttpCode, status_of
from rota.http.guard import Guard, host_name
from rota.http.routes import ROUTERS

log = logging.getLogger("rota.http")
OPENAPI_URL = "/v1/openapi.json"


def error_response(status: int, code: str, message: str) -> JSONResponse:
    message = " ".join(message.split())
    # the 500 handler answers from outside the Guard: it names nosniff itself
    return JSONResponse(
        {"error": {"code": str(code), "message": message}},
        status_code=status,
        headers={"X-Content-Type-Options": "nosniff"},
    )


def create_app(context: ApiContext) -> FastAPI:
    """The API over `context` (its scheduler, tokens and `[http]` settings)."""
    from rota import __version__

    app = FastAPI(
        title="rota",
        version=__version__,
        description="The HTTP API of rota: read the scheduler's state, operate Work.",
        openapi_url=None,  # served below, behind a read token like every route
        docs_url=None,
        redoc_url=None,
    )
    app.state.rota = context
    for router in ROUTERS:
        app.include_router(router)

    @app.get(OPENAPI_URL, include_in_schema=False, dependencies=[READ])
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    web.mount(app)  # the web view's pages under /ui (rota.http.web)
    _handlers(app)
    listen_host = host_name(context.settings.listen)
    hosts = [*context.settings.allowed_hosts]
    if listen_host not in ("0.0.0.0", "::", ""):
        hosts.append(listen_host)
    app.add_middleware(Guard, allowed_hosts=hosts, max_body=context.settings.max_body_bytes)
    return app


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(RotaError)
    async def rota_error(request: Request, exc: RotaError) -> JSONResponse:
        return error_response(status_of(exc), exc.code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors: list[Any] = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, HttpCode.MALFORMED_BODY, "the request body is not JSON")
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid')}"
        return error_response(422, HttpCode.INVALID_REQUEST, message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(404, HttpCode.ROUTE_NOT_FOUND, f"no route {request.url.path}")
        if exc.status_code == 405:
            return error_response(
                405, HttpCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here"
            )
        return error_response(exc.status_code, HttpCode.INVALID_REQUEST, str(exc.detail))

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("HTTP %s %s failed", request.method, request.url.path)
        return error_response(500, HttpCode.INTERNAL_ERROR, "the server failed; see its log")
