"""The API's request and response bodies (pydantic), and the error statuses each kind of
route documents in the OpenAPI document.

The views inside the bodies (a Work, an attempt, an event) are the JSON contracts the CLI
prints with `--json` (`rota.application.views`), so the API and the CLI cannot drift.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rota.domain import flow, schedule_specs, submission

WORK_ID = submission.WORK_ID.pattern
IDEMPOTENCY_KEY = submission.INPUT_KEY.pattern  # it becomes an input's key
SCHEDULE_NAME = schedule_specs.NAME.pattern
FLOW_KEY = flow.KEY.pattern
PAGE_DEFAULT, PAGE_MAX = 16, 64  # seed 002's paging: default 16, hard cap 64, limit + 1


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ----------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="a stable code: docs/errors.md lists them all")
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


DESCRIPTIONS = {
    400: "host_not_allowed, malformed_body or idempotency_key_required",
    401: "unauthorized: no bearer token, or an unknown one",
    403: "missing_scope, or serve_read_only (`rota serve`)",
    404: "unknown_work, unknown_schedule, or route_not_found",
    409: "the command was refused (its domain code)",
    413: "body_too_large, or payload_too_large",
    415: "unsupported_media_type: a mutating body must be application/json",
    422: "invalid_request (a field, parameter or header), or idempotency_key_reused",
    500: "internal_error",
    503: "not_ready, unhealthy or store_unavailable",
}
GUARDED = (400, 401, 403, 500)  # every route: Host allow-list, token, scope, failure
READ = (*GUARDED, 422, 503)  # a read with parameters
MUTATION = (*GUARDED, 404, 409, 413, 415, 422, 503)


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: each status with the error body it answers with."""
    return {s: {"model": ErrorBody, "description": DESCRIPTIONS[s]} for s in sorted(set(statuses))}


# -- reads -----------------------------------------------------------------------------


class WorkPage(BaseModel):
    works: list[dict[str, Any]] = Field(description="Work summaries, by id")
    next: str | None = Field(description="pass as `after` for the next page; null: no more")


class WorkDetail(BaseModel):
    work: dict[str, Any] = Field(description="the Work's view, as `rota work show --json`")
    explain: dict[str, Any] = Field(description="why it is in its state, citing positions")


class ArtifactRef(BaseModel):
    """An artifact reference an attempt's outcome recorded (rota.domain.artifacts)."""

    attempt: int = Field(description="the attempt's number")
    execution: str = Field(description="its execution id, `<work>/<attempt>`")
    name: str = Field(description="unique within the attempt's result")
    uri: str = Field(description="where the artifact is (s3://, https://, file:// ...)")
    digest: str | None = Field(description="`sha256:<64 hex>` or `sha512:<128 hex>`, or null")
    size: int | None = Field(description="its size in bytes, or null")


class Artifacts(BaseModel):
    work: str = Field(description="the Work's id")
    artifacts: list[ArtifactRef] = Field(description="every attempt's references, oldest first")


class PoolCapacity(BaseModel):
    limit: int = Field(description="0: unbounded")
    in_use: int = Field(description="attempts holding a slot, read from storage now")
    waiting: int = Field(
        description="ready Work this pool's limit held back on the daemon's last start pass "
        "(0 after a restart until the first pass, and always 0 under `rota serve`)"
    )
    preview: int = Field(description="ready Work a dry run of admission now holds back")


class KeyCapacity(BaseModel):
    limit: int = Field(description="the key's concurrency limit (`[[keys]]`)")
    in_use: int = Field(description="attempts holding a slot under the key, read now")
    waiting: int = Field(description="ready Work the key's limit held back on the last pass")
    preview: int = Field(description="ready Work a dry run of admission now holds back for it")


class BucketCapacity(BaseModel):
    rule: str = Field(description="the `[[rates]]` key that bounds it, or `throttle`")
    rate: str = Field(description="its rate in words: `100/min`")
    burst: int
    tokens: float = Field(description="tokens in the bucket now (0..burst)")
    next_token: str | None = Field(description="when the next token is due; null: it has one")


class PausedTarget(BaseModel):
    target: Literal["pool", "key", "scope"]
    name: str
    reason: str


class Capacity(BaseModel):
    pools: dict[str, PoolCapacity]
    scopes: dict[str, dict[str, int]]
    keys: dict[str, KeyCapacity] = Field(
        default_factory=dict,
        description="each limited concurrency key in use or holding Work back",
    )
    buckets: dict[str, BucketCapacity] = Field(
        default_factory=dict, description="each rate bucket the log has taken tokens from"
    )
    paused: list[PausedTarget] = Field(
        default_factory=list, description="the paused pools, keys and scopes (`rota pause`)"
    )
    waiting: list[dict[str, str]] = Field(
        description="who the daemon's last start pass held back, and why"
    )
    preview: list[dict[str, str]] = Field(
        description="who a dry run of admission now holds back, and why (nothing is written)"
    )
    waiting_from: Literal["last_pass", "none"] = Field(
        description="last_pass: this process runs the cadence (the daemon); none: it runs no "
        "start pass (`rota serve`), so `waiting` is empty: see `preview`"
    )


class SchedulerState(BaseModel):
    owner: str
    loop: Literal["running", "stopped", "none"]
    cadence_seconds: float
    last_pass_at: float | None = Field(description="Unix time the last pass ended")
    last_pass_seconds: float
    passes: int
    failed_passes: int
    leases_held: list[str]
    position: int = Field(description="the log head")
    applied: int = Field(description="the position the scheduler projection applied")
    lag: int = Field(description="position - applied")
    last_report: dict[str, Any] | None


class Hold(BaseModel):
    work: str
    kind: str
    reason: str
    holder: str | None
    position: int
    clears: str = Field(description="what clears it: the route to call")


class Holds(BaseModel):
    holds: list[Hold]


class AuditHead(BaseModel):
    position: int
    hash: str
    checkpoint: dict[str, Any] | None


class InclusionProof(BaseModel):
    """`rota-inclusion/1` (docs/auditor.md): the event at `position` is in the tree of
    `tree_size` events whose root the embedded checkpoint note signs."""

    format: Literal["rota-inclusion/1"]
    position: int
    tree_size: int
    previous_hash: str = Field(description="hex chain hash at position - 1 (64 zeros at 1)")
    envelope: str = Field(description="base64 of the exact canonical envelope bytes hashed")
    event_hash: str
    path: list[str] = Field(description="RFC 9162 inclusion path, hex, leaf first")
    checkpoint: str = Field(description="the whole checkpoint note (C2SP signed note)")


class ConsistencyProof(BaseModel):
    """`rota-consistency/1` (docs/auditor.md): the log at `new_size` extends `old_size`."""

    format: Literal["rota-consistency/1"]
    old_size: int
    new_size: int
    path: list[str] = Field(description="RFC 9162 consistency proof, hex")
    old_checkpoint: str
    new_checkpoint: str


class Health(BaseModel):
    status: Literal["ok"]
    detail: str


class SchedulePage(BaseModel):
    schedules: list[dict[str, Any]] = Field(
        description="schedule views by name, as `rota schedule list --json`"
    )
    next: str | None = Field(description="pass as `after` for the next page; null: no more")


class ScheduleDetail(BaseModel):
    schedule: dict[str, Any] = Field(
        description="definition, version, state (active, paused, quarantined), boundary, "
        "counts, and every version"
    )
    next: list[dict[str, Any]] = Field(
        description="the next nominal times: due (with jitter), local time, DST flag"
    )
    history: list[dict[str, Any]] = Field(
        description="the recent nominal times, oldest first: fired (Work, outcome), skipped "
        "(reason) or quarantined (reason)"
    )
    release: str | None = Field(description="how to release a quarantined schedule; else null")


class ScheduleAccepted(BaseModel):
    schedule: dict[str, Any] = Field(description="the schedule's view after the command")
    fired: str | None = Field(
        None,
        description="trigger: the fire's delivery identity (a repeat: the first fire's)",
    )
    repeated: bool = Field(False, description="trigger: the key fired before; nothing was appended")
    position: int = Field(
        description="the log head after the command (trigger: the fire's position)"
    )


# -- mutations -------------------------------------------------------------------------


class ThrottleBody(Body):
    key: str = Field(pattern=FLOW_KEY, description="the throttle's key, like `tenant:acme`")
    period: float = Field(
        gt=0, le=86400 * 366, strict=True, description="seconds between starts (at most a year)"
    )


class SubmitBody(Body):
    work: str = Field(pattern=WORK_ID)
    binding: str = Field(min_length=1, max_length=64)
    input: Any = None
    correlation_key: str | None = Field(None, max_length=200)
    scope: str = Field("root", max_length=200)
    kind: Literal["run-once", "standing"] = "run-once"
    trigger: Literal["all", "first", "last"] = "all"
    safety: Literal["undeclared", "idempotent", "deduplicated"] = "undeclared"
    grants: list[str] = Field(
        [], max_length=16, description="binding grants the Work opts into (`[[grants]]`)"
    )
    priority: int = Field(
        0,
        ge=-flow.MAX_PRIORITY,
        le=flow.MAX_PRIORITY,
        strict=True,
        description="higher starts first (strict levels; fair share within one)",
    )
    keys: list[Annotated[str, Field(pattern=FLOW_KEY)]] = Field(
        [],
        max_length=flow.MAX_KEYS,
        description="concurrency keys the Work counts under, like `tenant:acme` (`[[keys]]` "
        "limits them); the first is its fair-share flow",
    )
    cost: int = Field(
        1,
        ge=1,
        le=flow.MAX_COST,
        strict=True,
        description="the tokens a start takes from each rate bucket it meets (`[[rates]]`)",
    )
    throttle: ThrottleBody | None = Field(
        None, description="at most one start of the Works throttled on `key` every `period`"
    )
    personal: list[str] = Field(
        [],
        max_length=32,
        description="personal fields of the input (dotted paths into an object input, like "
        "`address.street`): sealed under the Work's own key until `/forget`",
    )


class AcceptBody(Body):
    input: Any = None
    correlation_key: str | None = Field(None, max_length=200)
    personal: list[str] = Field(
        [],
        max_length=32,
        description="personal fields of the input (dotted paths into an object input, like "
        "`address.street`): sealed under the Work's own key until `/forget`",
    )


class ReasonBody(Body):
    reason: str = Field("", max_length=1000)


class ReleaseBody(Body):
    kind: str | None = Field(None, max_length=64)


class SettleGateBody(Body):
    registration: str = Field(min_length=1, max_length=64)
    admit: bool
    reason: str = Field("", max_length=1000)


class InjectBody(Body):
    input: Any


class Empty(Body):
    pass


class PauseBody(Body):
    target: Literal["pool", "key", "scope"]
    name: str = Field(
        min_length=1,
        max_length=200,
        description="a pool (jobs), a concurrency key (tenant:acme) or a scope (root/batch)",
    )
    reason: str = Field("", max_length=1000)


class PriorityBody(Body):
    priority: int = Field(description="-1000 to 1000; higher starts first (the default is 0)")
    reason: str = Field("", max_length=1000)


class Pauses(BaseModel):
    paused: list[dict[str, Any]] = Field(
        description="the pauses in force, by target and name: `{target, name, reason, by, "
        "position, since}` (position and time of the event that paused it)"
    )
    position: int | None = Field(
        None, description="a pause or resume: the position of the event that recorded it"
    )
    request: dict[str, Any] | None = Field(
        None,
        description="a pause or resume: its receipt `{request_id, type, position, "
        "delivery_id, repeated}` (`repeated`: nothing was appended)",
    )


class Accepted(BaseModel):
    work: dict[str, Any] = Field(description="the Work's view now (after the command)")
    position: int = Field(
        description=(
            "the log position of the event that recorded the request (submit without "
            "input: the log head after it); a repeat answers the same position"
        )
    )
    request: dict[str, Any] | None = Field(
        None,
        description=(
            "retry, cancel, release, settle-gate, inject, interrupt: the receipt read from "
            "the log, `{request_id, type, position, delivery_id, repeated}` (`repeated`: "
            "an earlier request with this key recorded it; nothing was appended)"
        ),
    )
    inject: dict[str, Any] | None = Field(
        default=None,
        description="an inject's answer: `delivery` is `control` (to the running attempt), "
        "`wake` (its input resumes the parked attempt) or `queued` (with `queued`: why not)",
    )
