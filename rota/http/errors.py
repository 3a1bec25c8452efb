"""The HTTP API's error codes (`HttpCode`) and the status each error answers with.

Every error the API answers is a JSON body `{"error": {"code": ..., "message": ...}}` with
a stable code: one of these, or the code of the `RotaError` a command raised (a domain
refusal, a store error), passed through verbatim. This module imports nothing of the
`rota[http]` extra, so `rota.codes` can list the codes without it.
"""

from __future__ import annotations

from rota.application.errors import PortCode
from rota.domain.errors import DomainCode, ErrorCode, RotaError
from rota.infrastructure.config import EntryCode


class HttpCode(ErrorCode):
    """The HTTP API's codes: authentication, scopes, the request's shape, health."""

    HTTP_EXTRA_MISSING = "http_extra_missing"
    """The HTTP API needs the optional extra: `pip install 'rota[http]'`."""
    UNAUTHORIZED = "unauthorized"
    """No bearer token, or one the token file does not know (401): send a bearer token."""
    MISSING_SCOPE = "missing_scope"
    """The token lacks the scope the route needs (403): read, operate or admin."""
    HOST_NOT_ALLOWED = "host_not_allowed"
    """The Host header is not allowed (400, against DNS rebinding): see `[http] allowed_hosts`."""
    BODY_TOO_LARGE = "body_too_large"
    """The request body is over `[http] max_body_bytes` (413)."""
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    """A mutating request whose body is not `application/json` (415)."""
    MALFORMED_BODY = "malformed_body"
    """The request body is not valid JSON (400)."""
    INVALID_REQUEST = "invalid_request"
    """A body field, parameter or header is missing or out of range (422): the message names it."""
    IDEMPOTENCY_KEY_REQUIRED = "idempotency_key_required"
    """A mutation without an `Idempotency-Key` header (400): send one, the same on a retry."""
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    """An `Idempotency-Key` already used for another request (422): a key names one request."""
    ROUTE_NOT_FOUND = "route_not_found"
    """No such route (404): see /v1/openapi.json."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """The route does not take this method (405)."""
    SERVE_READ_ONLY = "serve_read_only"
    """`rota serve` is read-only (403): mutations go to a daemon's API (`rota run --http`)."""
    NOT_READY = "not_ready"
    """`/readyz`: the store does not answer, the projection lags, a fast doctor check fails or
    a schedule is stuck or quarantined."""
    UNHEALTHY = "unhealthy"
    """`/healthz`: the daemon loop has not ticked within three cadences (503)."""
    TOKEN_FILE_INVALID = "token_file_invalid"
    """The token file is not 0600, not valid JSON or not a rota token file: fix or recreate it."""
    TOKEN_EXISTS = "token_exists"
    """`rota token add`: a token of that name exists; remove it first."""
    UNKNOWN_TOKEN = "unknown_token"
    """`rota token remove`: no token of that name in the token file."""
    INVALID_ADDRESS = "invalid_address"
    """`--http ADDR`: not HOST:PORT (a port from 0 to 65535), or a host it cannot listen on."""
    ADDRESS_IN_USE = "address_in_use"
    """`--http ADDR` / `[http] listen`: another process listens on that port: stop it or
    choose another port."""
    INTERNAL_ERROR = "internal_error"
    """The server failed unexpectedly (500); the daemon's log has the details."""


class ApiError(RotaError):
    """An error the API answers with its own `status` and code."""

    code = HttpCode.INTERNAL_ERROR

    def __init__(self, message: str, *, code: ErrorCode, status: int) -> None:
        super().__init__(message, code=code)
        self.status = status


# The status of a RotaError by its code; anything else a command refuses is a conflict.
STATUS_OF: dict[str, int] = {
    DomainCode.UNKNOWN_WORK: 404,
    DomainCode.UNKNOWN_SCHEDULE: 404,
    DomainCode.INVALID_SCHEDULE: 422,
    DomainCode.INVALID_COMMAND: 422,
    DomainCode.INVALID_WORK: 422,
    DomainCode.INVALID_WORK_ID: 422,
    DomainCode.INVALID_SCOPE: 422,
    DomainCode.INVALID_KEY: 422,
    DomainCode.INVALID_FLOW: 422,
    DomainCode.INVALID_PAGE: 422,
    DomainCode.PAYLOAD_TOO_LARGE: 413,
    DomainCode.PAYLOAD_TOO_DEEP: 422,
    DomainCode.NOT_JSON: 422,
    DomainCode.INVALID_CONFIG: 422,
    DomainCode.INVALID_FLOW: 422,
    DomainCode.INVALID_PERSONAL: 422,
    PortCode.PERSONAL_UNAVAILABLE: 501,
    EntryCode.USAGE: 422,
    PortCode.STORE_UNAVAILABLE: 503,
}
REFUSAL_STATUS = 409


def status_of(error: RotaError) -> int:
    """The HTTP status for an error a command raised."""
    if isinstance(error, ApiError):
        return error.status
    return STATUS_OF.get(error.code, REFUSAL_STATUS)
