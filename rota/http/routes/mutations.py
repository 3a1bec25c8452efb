"""The mutations: submit, accept input, retry, cancel, release, settle a gate, inject,
interrupt, forget. Each takes an `Idempotency-Key` header and records the token's name as who
acted. `recover-corrupt` is never offered over HTTP.

The key is recorded in the log, never only in this process's memory, so a repeat is
answered from the log, after a restart too (`rota.application.commands.requests`):

- submit and accept: the key is the input's key (`input/<work>/<key>`);
- inject: the key is its request id, which is the input's key (`input/<work>/<key>` and
  the intent `control/<work>/inject/<key>`);
- retry, cancel, release, settle-gate, interrupt: the key is the request id, the delivery
  identity `request/<key>` of the event that answers the request;
- forget: the key is checked, not recorded: forgetting is once per Work
  (`personal/<work>/forgotten`), so any repeat answers the first record.

A repeat appends nothing and answers with the same `request` receipt and `position`
(`work` is the Work's view now); the key sent with another request is
`422 idempotency_key_reused`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, TypeVar

import msgspec
from fastapi import APIRouter, Depends, Header, Path

from rota.application.commands.requests import Receipt
from rota.application.errors import PortCode
from rota.domain.errors import RotaError
from rota.domain.events.work import Throttle
from rota.embedded.submission_values import Submission
from rota.http.context import ApiContext
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
        description=(
            f"required, matching {IDEMPOTENCY_KEY}: names the request in the log; send the "
            "same key when you retry the same request (a repeat appends nothing and gets the "
            "first answer, after a restart too); another request under a used key is 422 "
            "idempotency_key_reused"
        ),
    ),
]
RESPONSES = documented(*MUTATION)
# A key recorded for another request: the request id's code, or the store's for an input's
# key recorded with another payload.
REUSED = frozenset({PortCode.REQUEST_ID_REUSED, PortCode.DELIVERY_CONFLICT})


def once(api: ApiContext, key: str | None, act: Callable[[str], T]) -> T:
    """Check the key, then run `act(key)`: the command records the key in the log, so a
    repeat is answered from it. The schedule mutations (`rota.http.routes.schedules`) use
    it too."""
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
    try:
        return act(key)
    except RotaError as error:
        if error.code in REUSED:
            raise ApiError(
                f"Idempotency-Key {key!r} was used for another request: {error}",
                code=HttpCode.IDEMPOTENCY_KEY_REUSED,
                status=422,
            ) from error
        raise


def _mutate(
    api: ApiContext,
    key: str | None,
    work_id: str,
    act: Callable[[str], Receipt | int | None],
) -> Accepted:
    """`once(...)` of a Work's command, answered with its receipt and the Work's view."""

    def run(key: str) -> Accepted:
        scheduler = api.scheduler
        done = act(key)
        view = scheduler.work(work_id)
        if isinstance(done, Receipt):
            position = done.position
        else:
            position = done if done is not None else scheduler.store.head().position
        return Accepted(
            work=msgspec.to_builtins(view) if view is not None else {},
            position=position,
            request=msgspec.to_builtins(done) if isinstance(done, Receipt) else None,
        )

    return once(api, key, run)


@router.post("/works", responses=RESPONSES)
def submit(api: Api, token: Operator, body: SubmitBody, key: KeyHeader = None) -> Accepted:
    """Define a Work and accept its input (the key is the input's key)."""

    def act(key: str) -> int | None:
        given = "input" in body.model_fields_set
        handle = api.scheduler.submit_one(
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
                priority=body.priority,
                keys=tuple(body.keys),
                cost=body.cost,
                throttle=None
                if body.throttle is None
                else Throttle(body.throttle.key, body.throttle.period),
                personal=tuple(body.personal),
            )
        )
        return handle.input_position

    return _mutate(api, key, body.work, act)


@router.post("/work/{work_id}/inputs", responses=RESPONSES)
def accept(
    api: Api, token: Operator, work_id: WorkId, body: AcceptBody, key: KeyHeader = None
) -> Accepted:
    """Give a Work one more input (the key is the input's key)."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.accept(
            work_id,
            body.input,
            key=key,
            correlation_key=body.correlation_key,
            personal=tuple(body.personal),
        ),
    )


@router.post("/work/{work_id}/forget", responses=RESPONSES)
def forget(
    api: Api, token: Operator, work_id: WorkId, body: ReasonBody, key: KeyHeader = None
) -> Accepted:
    """Forget the Work's personal input fields: their key is destroyed and
    `core.work.forgotten` recorded (by the token's name), once; a repeat answers the first
    record's position. The log, its chain and its proofs still verify."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.forget(work_id, by=token.name, reason=body.reason),
    )


@router.post("/work/{work_id}/retry", responses=RESPONSES)
def retry(
    api: Api, token: Operator, work_id: WorkId, body: ReasonBody, key: KeyHeader = None
) -> Accepted:
    """Manually retry a failed Work (`core.manual.retry`, by the token's name)."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.retry(
            work_id, reason=body.reason, requested_by=token.name, request_id=key
        ),
    )


@router.post("/work/{work_id}/cancel", responses=RESPONSES)
def cancel(
    api: Api, token: Operator, work_id: WorkId, body: ReasonBody, key: KeyHeader = None
) -> Accepted:
    """Cancel a Work: its attempt, waits, timers and input are fenced at once."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.cancel(
            work_id, reason=body.reason, by=token.name, request_id=key
        ),
    )


@router.post("/work/{work_id}/release", responses=RESPONSES)
def release(
    api: Api, token: Operator, work_id: WorkId, body: ReleaseBody, key: KeyHeader = None
) -> Accepted:
    """Release an operator-releasable hold (budget, crash_loop, operator); a gate's hold
    is settled by its gate (`settle-gate`)."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.release(work_id, kind=body.kind, by=token.name, request_id=key),
    )


@router.post("/work/{work_id}/settle-gate", responses=RESPONSES)
def settle_gate(
    api: Api, token: Admin, work_id: WorkId, body: SettleGateBody, key: KeyHeader = None
) -> Accepted:
    """Settle a start gate's hold as its registration: admit (one pass) or refuse (cancel).
    Needs `admin`: it decides in the gate's place."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.settle_gate(
            work_id, body.registration, admit=body.admit, reason=body.reason, request_id=key
        ),
    )


@router.post("/work/{work_id}/inject", responses=RESPONSES)
def inject(
    api: Api, token: Operator, work_id: WorkId, body: InjectBody, key: KeyHeader = None
) -> Accepted:
    """Give the running attempt an input now (the key is the input's key); a parked
    attempt takes it through its wait (`inject.delivery`: `wake` or `queued`, and why)."""

    def run(key: str) -> Accepted:
        scheduler = api.scheduler
        answer = scheduler.inject(work_id, body.input, by=token.name, request_id=key)
        view = scheduler.work(work_id)
        receipt = answer.request
        return Accepted(
            work=msgspec.to_builtins(view) if view is not None else {},
            position=receipt.position if receipt is not None else answer.position,
            request=msgspec.to_builtins(receipt) if receipt is not None else None,
            inject={k: v for k, v in msgspec.to_builtins(answer).items() if k != "request"},
        )

    return once(api, key, run)


@router.post("/work/{work_id}/interrupt", responses=RESPONSES)
def interrupt(
    api: Api, token: Operator, work_id: WorkId, body: Empty, key: KeyHeader = None
) -> Accepted:
    """Fence the running attempt (the Work is ready again at once), then interrupt it."""
    return _mutate(
        api,
        key,
        work_id,
        lambda key: api.scheduler.interrupt(work_id, by=token.name, request_id=key),
    )
