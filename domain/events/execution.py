"""Events of an attempt (an execution): claim, launch, lease, outcome, turn.

Every event written on behalf of an attempt names its `work_id`, `attempt` number and lease
`epoch`; the decision that produced it checked that the epoch was current and the lease
unexpired (fencing). All of them live on the Work's stream, so the stream version fences
every transition of the Work and its attempts.
"""

from datetime import datetime
from typing import Any, ClassVar, Literal

import msgspec

from rota.domain.artifacts import Artifact
from rota.domain.events.base import Event
from rota.domain.policy import Pinned
from rota.domain.waits_types import WaitPredicate

SegmentKind = Literal["start", "resume", "recovered", "relaunched"]
PhaseOutcome = Literal["ok", "failed", "cancelled"]


class Invoked(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The invoke marker a claim carries (`AttemptClaimed.invoked`): its executor is called as
    soon as the claim is durable, with nothing in between. `isolated`, as `LaunchInvoked`'s
    (always written)."""

    isolated: bool


class AttemptClaimed(
    Event, tag="core.execution.claimed", frozen=True, kw_only=True, omit_defaults=True
):
    """Attempt N of a Work began: its lease, pinned snapshot and consumed input.

    This is also the durable launch intent: it opens the first segment with its invoke
    marker `pending`, before any executor is called. `consumed` lists the log positions of
    the inputs the attempt took, in order; `trigger` is the one that triggered it.
    The pinned binding holds no secret: a binding's `environment` table is resolved again
    at each launch, and `pinned.binding.secrets_digest` (a slow salted digest, or null)
    only tells whether it changed since. `grants` names the binding grants the attempt
    took (its Work's, in order): `pinned.binding.config` has their config applied and
    `secrets_digest` covers their `environment` values, which are never written; recovery
    and resume keep them (a pre-grants claim reads as `[]`).

    `invoked` (version 2) is the invoke marker when the executor is called as soon as the
    claim is durable (no launch phase, run-environment hook or anything else runs between
    them): `{"isolated": bool}`, exactly a `core.execution.invoked` at the claim's position
    (the segment opens with its marker `called`; recovery adopts rather than relaunches,
    unless `isolated` and no recovery metadata was pinned since). Null when the launch is
    invoked later by its own `core.execution.invoked` (a binding with launch phases or a
    run-environment hook), and in version 1, which always wrote the marker apart. Version 2
    is a new version, not an added field, so that an older rota refuses the row instead
    of reading the marker as `pending` (and relaunching a launch that was called). Version 2
    leaves out its fields at their defaults (`passes` and `grants` [], `invoked` null, and
    in `pinned` at every depth: `config` {}, `retry`'s defaults, `handoff` stop, the pool
    `agents`, `max_segments` 50 ...): an absent field reads as its default.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    owner: str
    lease_expires_at: datetime
    deadline: datetime
    consumed: list[int]
    trigger: int | None
    pinned: Pinned
    passes: list[str] = msgspec.field(default_factory=list)
    # The binding grants the attempt took (its Work's, in order): `pinned.binding.config`
    # has their config applied; their environment values are never written (a grant's
    # `environment`, like a binding's, is resolved at each launch). [] before grants.
    grants: list[str] = msgspec.field(default_factory=list)
    # The invoke marker, when the executor is called as soon as this claim is durable.
    invoked: Invoked | None = None

    version: ClassVar[int] = 2
    lean_fields: ClassVar[tuple[str, ...]] = ("pinned",)


class AttemptResumed(Event, tag="core.execution.resumed", frozen=True, kw_only=True):
    """A parked attempt resumed under a new epoch, opening a `resume` segment.

    `wake` is the log position of the input that woke it; the deadline is now plus the
    remaining timeout budget stored when it parked.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    owner: str
    lease_expires_at: datetime
    deadline: datetime
    consumed: list[int]
    wake: int | None
    passes: list[str] = msgspec.field(default_factory=list)


class CapacityClaimed(Event, tag="core.capacity.claimed", frozen=True, kw_only=True):
    """Slots of a capacity pool were taken by these executions (fences concurrent claims).

    Appending it bumps the pool stream's version, so two schedulers that decided on the same
    view of the pool cannot both commit: the limit holds when several hosts race.
    """

    stream_pattern: ClassVar[str] = "pool/<pool>"

    pool: str
    executions: list[str]


class LaunchInvoked(Event, tag="core.execution.invoked", frozen=True, kw_only=True):
    """The fenced write just before the executor is called: invoke marker `called`.

    `isolated` records whether a sandbox or container was bound first (which holds every
    process until it is pinned). Recovery reads this marker to choose relaunch or adoption.
    A launch called as soon as its claim is durable carries the marker in the claim
    instead (`core.execution.claimed` `invoked`, version 2); this event is written for a
    launch with launch phases or a run-environment hook between claim and call (and was
    written for every launch before).
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    isolated: bool = False


class LaunchPhaseBegan(Event, tag="core.execution.phase_began", frozen=True, kw_only=True):
    """A launch phase (toolbelt, secrets, environment, sandbox, executor ...) began."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    phase: str


class LaunchPhaseEnded(Event, tag="core.execution.phase_ended", frozen=True, kw_only=True):
    """A launch phase ended with its outcome: ok, failed or cancelled."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    phase: str
    outcome: PhaseOutcome


class RecoveryPersisted(Event, tag="core.execution.recovery_persisted", frozen=True, kw_only=True):
    """The executor persisted bounded, opaque recovery metadata through the fenced callback."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    metadata: Any

    pruned_fields: ClassVar[tuple[str, ...]] = ("metadata",)


class LeaseRenewed(Event, tag="core.execution.renewed", frozen=True, kw_only=True):
    """The attempt's lease was renewed; the expiry never moves earlier (clock steps back)."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    lease_expires_at: datetime


class LeaseReleased(Event, tag="core.execution.released", frozen=True, kw_only=True):
    """The holder released the lease (a graceful stop); the attempt becomes recoverable."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    reason: str = "released"


class _Outcome(Event, frozen=True, kw_only=True):
    stream_pattern: ClassVar[str] = "work/<work>"
    # The attempt outcome this event records, as work show and the history name it.
    outcome_name: ClassVar[str] = "ended"
    pruned_fields: ClassVar[tuple[str, ...]] = ("data",)

    work_id: str
    attempt: int
    epoch: int
    data: Any = None
    usage: dict[str, float] = msgspec.field(default_factory=dict)
    consumed: list[int] = msgspec.field(default_factory=list)
    # References to what the attempt produced (rota.domain.artifacts); [] before them.
    artifacts: list[Artifact] = msgspec.field(default_factory=list)


class AttemptCompleted(_Outcome, tag="core.execution.completed", frozen=True, kw_only=True):
    """The attempt finished successfully with its data and usage (a structured result).

    Every outcome event (completed, failed, handed off, parked) carries `artifacts`: the
    references to what the attempt produced (`name`, `uri`, `digest`, `size`; see
    rota.domain.artifacts), checked before they are written; a pre-artifacts outcome
    reads as `[]`.
    """

    outcome_name: ClassVar[str] = "completed"


class AttemptFailed(_Outcome, tag="core.execution.failed", frozen=True, kw_only=True):
    """The attempt failed. Only an operation error's code and message are kept.

    `permanent` marks a failure retrying cannot cure; `retry_at` is the executor's retry
    hint (a reset time) and `retry_unknown` a hint with an unknown reset. Any other error
    text an executor produced is never stored (it may carry provider output).
    `holds_resources` marks a safe failure that is no proof nothing of the attempt runs
    (a launch that returned without persisting its recovery metadata, or an ambiguous
    launch): the attempt keeps its capacity slot until its stop is confirmed.
    """

    outcome_name: ClassVar[str] = "failed"

    error_code: str = "failed"
    error_message: str = ""
    permanent: bool = False
    retry_at: datetime | None = None
    retry_unknown: bool = False
    holds_resources: bool = False


class AttemptHandedOff(_Outcome, tag="core.execution.handed_off", frozen=True, kw_only=True):
    """The attempt handed the Work back; it is ready for eligible input again."""

    outcome_name: ClassVar[str] = "handoff"


class AttemptParked(_Outcome, tag="core.execution.parked", frozen=True, kw_only=True):
    """The attempt parked to wait; its open segment ended with the remaining budget kept.

    `wait` is the predicate it registered (`{"kind": "key" | "schema" | "named", ...}`):
    only input it matches resumes the attempt; null when none was registered (any input
    wakes it), as every park recorded before predicates existed decodes.
    """

    outcome_name: ClassVar[str] = "waiting"

    remaining_seconds: float
    wait: WaitPredicate | None = None


class WaitJudged(Event, tag="core.execution.wait_judged", frozen=True, kw_only=True):
    """A named wait predicate judged a pending input (by its key): `matched` input may
    resume the parked attempt, other input stays queued. Recorded because the predicate is
    code, not data: replay reads this verdict and never calls the predicate again. `epoch`
    is the parked attempt's epoch; each input is judged once per park.
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "wait/<execution>/<epoch>/<input key>"

    work_id: str
    attempt: int
    epoch: int
    name: str
    key: str
    matched: bool


class AttemptTimedOut(_Outcome, tag="core.execution.timed_out", frozen=True, kw_only=True):
    """The persisted deadline was due under a current lease: the attempt failed by timeout.

    The resource hold stays until the stop is confirmed.
    """

    outcome_name: ClassVar[str] = "timed_out"


class StopConfirmed(Event, tag="core.execution.stop_confirmed", frozen=True, kw_only=True):
    """The trusted host verified the attempt's processes stopped; its slot is free."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    evidence: str = "verified"


class TurnPublished(Event, tag="core.execution.turn", frozen=True, kw_only=True):
    """An outcome declared a turn (`core.turn.v1 {status, comment}`): one per correlation key.

    Recorded as unmatched, never as input: it never wakes or feeds the Work that published
    it. The delivery identity makes a repeated transition a no-op, and a resumed attempt's
    next turn (a new epoch) a new event.
    """

    stream_pattern: ClassVar[str] = "turns/<work>"
    delivery_pattern: ClassVar[str | None] = "turn/<execution>/<epoch>[/<key>]"

    work: str
    execution: str
    epoch: int
    status: str
    comment: str = ""
    key: str | None = None


class HandoffContinued(Event, tag="core.execution.handoff", frozen=True, kw_only=True):
    """An attempt handed off under `handoff = "continue"`: the Work continues from it.

    Derived from the outcome and appended with it, together with the queue checkpoint: a
    `core.input.accepted` for the same Work under key `handoff:<attempt>:<epoch>`, whose
    payload is the handoff's data, so the next attempt consumes it and continues without
    outside input. `checkpoint` is the log position of the last input the handing-off
    attempt consumed; `continuation` counts the continuations in a row (1, 2, ...).
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "handoff/<execution>/<epoch>"

    work_id: str
    attempt: int
    epoch: int
    checkpoint: int = 0
    continuation: int = 1


class HandoffRefused(Event, tag="core.execution.handoff_refused", frozen=True, kw_only=True):
    """A continuation was refused for a causal reason; the handoff outcome stands.

    `reason`: `run_once` (a run-once Work's handoff settles it as completed),
    `continuation_limit` (MAX_CONTINUATIONS in a row without outside input) or
    `invalid_payload` (the handoff's data cannot be the next input). No input is queued.
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "handoff/<execution>/<epoch>"

    work_id: str
    attempt: int
    epoch: int
    reason: str
    detail: str = ""


OUTCOMES: tuple[type[_Outcome], ...] = (
    AttemptCompleted,
    AttemptFailed,
    AttemptHandedOff,
    AttemptParked,
    AttemptTimedOut,
)
