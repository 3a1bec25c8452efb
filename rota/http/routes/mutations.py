"""The mutations: submit, accept input, retry, cancel, release, settle a gate, inject,
interrupt. Each takes an `Idempotency-Key` header and records the token's name as who
acted. `recover-corrupt` is never offered over HTTP.

The key is the delivery identity where the command takes one: the input's key for
submit, accept and inject (`input/<work>/<key>`), so a repeat is a no-op in the log itself,
across restarts. The other commands are idempotent in the domain already (a retry per
failure, a gate settlement per decision; a second cancel or release is refused), and every
answer is also remembered by (token, key): a repeat gets the first answer, another request
under the same key is `idempotency_key_reused`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, TypeVar

import msgspec
from fastapi import APIRouter, Depends, Header, Path
from pydantic import BaseModel

from rota.embedded.submission_values import Submission
from rota.http.context import ApiContext, Idempotency
from rota.http.deps import context, scope
from rota.http.errors import ApiError, HttpCode
from rota.http.models import (
    IDEMPOTENCY_KEY,
    MUTATION,
    WORK_ID,
    AcceptBody,
    Accepted,
    Empty,
    InjectBody,
    ReasonBody,
    ReleaseBody,
    SettleGateBody,
    SubmitBody,
    documented,
)
from rota.http.tokens import Token

router = APIRouter(prefix="/v1", tags=["operate"])
T = TypeVar("T")
KEY = re.compile(IDEMPOTENCY_KEY)
WorkId = Annotated[str, Path(pattern=WORK_ID)]
Api = Annotated[ApiContext, Depends(context)]
Operator = Annotated[Token, Depends(scope("operate"))]
Admin = Annotated[Token, Depends(scope("admin"))]
KeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="required: the same key on a retry of the same request",
    ),
]
RESPONSES = documented(*MUTATION)


def once(
    api: ApiContext,
    token: Token,
    key: str | None,
    route: str,
    body: BaseModel,
    act: Callable[[str], T],
) -> T:
    """Check the key, run `act(key)` once per (token, key); a repeat gets the first answer.
    The schedule mutations (`rota.http.routes.schedules`) use it too."""
    if api.read_only:
        raise ApiError(
            "rota serve is read-only: send mutations to a daemon (rota run --http)",
            code=HttpCode.SERVE_READ_ONLY,
            status=403,
        )
    if key is None:
        raise ApiError(
            "send an Idempotency-Key header (the same one on a retry)",
            code=HttpCode.IDEMPOTENCY_KEY_REQUIRED,
            status=400,
        )
    if not KEY.fullmatch(key):
        raise ApiError(
            f"Idempotency-Key must match {IDEMPOTENCY_KEY}",
            code=HttpCode.INVALID_REQUEST,
            status=422,
        )
    # Unset fields count: a submit without input is not the one with `"input": null`.
    fingerprint = Idempotency.fingerprint(route, body.model_dump(mode="json", exclude_unset=True))
    seen = api.idempotency.seen(token.name, key)
    if seen is not None:
        if seen[0] != fingerprint:
            raise ApiError(
                f"Idempotency-Key {key!r} was used for another request",
                code=HttpCode.IDEMPOTENCY_KEY_REUSED,
                status=422,
            )
        first: T = seen[1]
        return first
    answer = act(key)
    api.idempotency.remember(token.name, key, fingerprint, answer)
    return answer


def _mutate(
    api: ApiContext,
    token: Token,
    key: str | None,
    route: str,
    body: BaseModel,
    work_id: str,
    act: Callable[[str], object],
) -> Accepted:
    """`once(...)` of a Work's command, answered with the Work's view."""

    def run(key: str) -> Accepted:
        scheduler = api.scheduler
        act(key)
        view = scheduler.work(work_id)
        return Accepted(
            work=msgspec.to_builtins(view) if view is not None else {},
            position=scheduler.store.head().position,
        )

    return once(api, token, key, route, body, run)


@router.post("/works", responses=RESPONSES)
def submit(api: Api, token: Operator, body: SubmitBody, key: KeyHeader = None) -> Accepted:
    """Define a Work and accept its input (the key is the input's key)."""

    def act(key: str) -> object:
        given = "input" in body.model_fields_set
        return api.scheduler.submit_one(
            Submission(
                body.work,
                binding=body.binding,
                input=body.input if given else msgspec.UNSET,
                input_key=key,
                correlation_key=body.correlation_key,
                scope=body.scope,
                kind=body.kind,
                trigger=body.trigger,
                safety=body.safety,
                grants=tuple(body.grants),
            )
        )

    return _mutate(api, token, key, "submit", body, body.work, act)


@router.post("/work/{work_id}/inputs", responses=RESPONSES)
def accept(
    api: Api, token: Operator, work_id: WorkId, body: AcceptBody, key: KeyHeader = None
) -> Accepted:
    """Give a Work one more input (the key is the input's key)."""
    return _mutate(
        api,
        token,
        key,
        f"accept/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.accept(
            work_id, body.input, key=key, correlation_key=body.correlation_key
        ),
    )


@router.post("/work/{work_id}/retry", responses=RESPONSES)
def retry(
    api: Api, token: Operator, work_id: WorkId, body: ReasonBody, key: KeyHeader = None
) -> Accepted:
    """Manually retry a failed Work (`core.manual.retry`, by the token's name)."""
    return _mutate(
        api,
        token,
        key,
        f"retry/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.retry(work_id, reason=body.reason, requested_by=token.name),
    )


@router.post("/work/{work_id}/cancel", responses=RESPONSES)
def cancel(
    api: Api, token: Operator, work_id: WorkId, body: ReasonBody, key: KeyHeader = None
) -> Accepted:
    """Cancel a Work: its attempt, waits, timers and input are fenced at once."""
    return _mutate(
        api,
        token,
        key,
        f"cancel/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.cancel(work_id, reason=body.reason, by=token.name),
    )


@router.post("/work/{work_id}/release", responses=RESPONSES)
def release(
    api: Api, token: Operator, work_id: WorkId, body: ReleaseBody, key: KeyHeader = None
) -> Accepted:
    """Release an operator-releasable hold (budget, crash_loop, operator); a gate's hold
    is settled by its gate (`settle-gate`)."""
    return _mutate(
        api,
        token,
        key,
        f"release/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.release(work_id, kind=body.kind, by=token.name),
    )


@router.post("/work/{work_id}/settle-gate", responses=RESPONSES)
def settle_gate(
    api: Api, token: Admin, work_id: WorkId, body: SettleGateBody, key: KeyHeader = None
) -> Accepted:
    """Settle a start gate's hold as its registration: admit (one pass) or refuse (cancel).
    Needs `admin`: it decides in the gate's place."""
    return _mutate(
        api,
        token,
        key,
        f"settle-gate/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.settle_gate(
            work_id, body.registration, admit=body.admit, reason=body.reason
        ),
    )


@router.post("/work/{work_id}/inject", responses=RESPONSES)
def inject(
    api: Api, token: Operator, work_id: WorkId, body: InjectBody, key: KeyHeader = None
) -> Accepted:
    """Give the running attempt an input now (the key is the input's key)."""
    return _mutate(
        api,
        token,
        key,
        f"inject/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.inject(work_id, body.input, key=key, by=token.name),
    )


@router.post("/work/{work_id}/interrupt", responses=RESPONSES)
def interrupt(
    api: Api, token: Operator, work_id: WorkId, body: Empty, key: KeyHeader = None
) -> Accepted:
    """Fence the running attempt (the Work is ready again at once), then interrupt it."""
    return _mutate(
        api,
        token,
        key,
        f"interrupt/{work_id}",
        body,
        work_id,
        lambda key: api.scheduler.interrupt(work_id, by=token.name),
    )
