"""The records the history projection keeps: per Work and attempt, facts with positions.

Mutable msgspec Structs (the history fold updates them in place) encoded as JSON rows.
Every `int` named after an event (`claimed`, `held`, `fired` ...) is the log position of
the event that caused the fact; the `..._at` beside it is that event's recorded time.
"""

from datetime import datetime

import msgspec

from rota.domain.artifacts import Artifact
from rota.domain.events import (
    Event,
)
from rota.domain.events.execution import _Outcome
from rota.domain.events.recovery import AttemptLost

INTERRUPTED = "core.execution.interrupted"


class Mark(msgspec.Struct, gc=False):
    """Any other event of a Work or attempt: its type and position."""

    type: str
    position: int
    at: datetime


class PhaseRecord(msgspec.Struct, kw_only=True, gc=False):
    name: str
    began: int
    began_at: datetime
    ended: int | None = None
    ended_at: datetime | None = None
    outcome: str | None = None


class SegmentRecord(msgspec.Struct, kw_only=True, gc=False):
    """A segment: `start`, `resume`, `recovered` or `relaunched`, and where it ended."""

    kind: str
    epoch: int
    started: int
    started_at: datetime
    ended: int | None = None
    ended_at: datetime | None = None
    invoked: int | None = None
    isolated: bool = False
    wake: int | None = None
    phases: list[PhaseRecord] = msgspec.field(default_factory=list)


class OutcomeRecord(msgspec.Struct, kw_only=True, gc=False):
    """An outcome (`completed`, `failed`, `timed_out`, `handoff`, `waiting`, `lost`,
    `interrupted`, `cancelled`) with its epoch and, for failures, the error."""

    kind: str
    position: int
    at: datetime
    epoch: int
    error_code: str | None = None
    error_message: str | None = None
    permanent: bool = False
    retry_at: datetime | None = None
    retry_unknown: bool = False
    artifacts: list[Artifact] = msgspec.field(default_factory=list)


class RecoveryRecord(msgspec.Struct, kw_only=True, gc=False):
    position: int
    at: datetime
    mode: str
    reason: str
    epoch: int
    previous_owner: str


class AttemptHistory(msgspec.Struct, kw_only=True, gc=False):
    """Attempt `number` of a Work, from its claim on."""

    work_id: str
    number: int
    claimed: int
    claimed_at: datetime
    owner: str
    epoch: int
    lease_expires_at: datetime
    deadline: datetime
    consumed: list[int] = msgspec.field(default_factory=list)
    trigger: int | None = None
    segments: list[SegmentRecord] = msgspec.field(default_factory=list)
    renewals: int = 0
    renewed: int | None = None
    released: int | None = None
    release_reason: str | None = None
    recoveries: list[RecoveryRecord] = msgspec.field(default_factory=list)
    outcomes: list[OutcomeRecord] = msgspec.field(default_factory=list)
    stop_confirmed: int | None = None
    marks: list[Mark] = msgspec.field(default_factory=list)

    @property
    def outcome(self) -> OutcomeRecord | None:
        return self.outcomes[-1] if self.outcomes else None


class HoldRecord(msgspec.Struct, kw_only=True, gc=False):
    kind: str
    reason: str
    holder: str
    held: int
    held_at: datetime
    released: int | None = None
    released_at: datetime | None = None
    released_by: str | None = None


class FailureRecord(msgspec.Struct, kw_only=True, gc=False):
    """A failure the Work's retry accounting counts: failed, timed out or lost."""

    kind: str
    position: int
    at: datetime
    attempt: int
    code: str
    message: str = ""
    permanent: bool = False


class RetryRecord(msgspec.Struct, kw_only=True, gc=False):
    """A retry timer: armed after the failure at `failure`, due at `due_at`, maybe fired."""

    generation: int
    armed: int
    armed_at: datetime
    due_at: datetime
    attempt: int
    failure: int | None = None
    hinted: bool = False
    fired: int | None = None
    fired_at: datetime | None = None


class RequestRecord(msgspec.Struct, kw_only=True, gc=False):
    """A manual retry request (`core.manual.retry` or its alias) and the failure it answers."""

    type: str
    position: int
    at: datetime
    boundary: int
    requested_by: str
    reason: str = ""


class WorkHistory(msgspec.Struct, kw_only=True, gc=False):
    """A Work's own story (its attempts are separate rows)."""

    work_id: str
    submitted: int
    submitted_at: datetime
    inputs: int = 0
    last_input: int | None = None
    attempts: int = 0
    holds: list[HoldRecord] = msgspec.field(default_factory=list)
    failures: list[FailureRecord] = msgspec.field(default_factory=list)
    retries: list[RetryRecord] = msgspec.field(default_factory=list)
    requests: list[RequestRecord] = msgspec.field(default_factory=list)
    cancelled: int | None = None
    cancelled_at: datetime | None = None
    cancel_reason: str | None = None
    marks: list[Mark] = msgspec.field(default_factory=list)


def _plain(obj: object) -> object:
    if isinstance(obj, datetime):  # a datetime subclass (freezegun's) encodes as one
        return obj.isoformat().replace("+00:00", "Z")
    raise TypeError(f"cannot encode {type(obj).__name__}")


encoder = msgspec.json.Encoder(enc_hook=_plain)


def close_segment(attempt: AttemptHistory, position: int, at: datetime) -> None:
    if attempt.segments and attempt.segments[-1].ended is None:
        attempt.segments[-1].ended, attempt.segments[-1].ended_at = position, at


def outcome_kind(event: Event) -> str:
    if isinstance(event, _Outcome):
        return event.outcome_name
    if isinstance(event, AttemptLost):
        return "lost"
    return "interrupted" if event.tag() == INTERRUPTED else "ended"
