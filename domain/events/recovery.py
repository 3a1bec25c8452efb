"""Events of recovery: an attempt whose lease was lost is recovered, relaunched or lost,
or its recovery failed, and Work that keeps crashing or failing recovery is held."""

from datetime import datetime
from typing import ClassVar, Literal

from rota.domain.events.base import Event

RecoveryMode = Literal["adopt", "relaunch"]
RecoveryReason = Literal["lease_expired", "released", "timeout", "not_started"]


class AttemptRecovered(Event, tag="core.execution.recovered", frozen=True, kw_only=True):
    """Recovery claimed the same attempt at a higher epoch, before calling any executor.

    The open segment ends and a new one begins at the same instant: `recovered` when the
    attempt is adopted (its process may be running; recovery never runs it again), or
    `relaunched` when its launch lost the lease before it started anything (the executor
    was never called, or was called after isolation was bound and nothing was pinned):
    then it runs again under the new epoch, failing nothing and spending no retry.

    `deadline`, when set, moves the attempt's deadline: the host recovering an attempt its
    own process runs measured its run time by a monotonic clock, and the wall clock had
    stepped forward past the old deadline (docs/operator.md, "Clock jumps"). None keeps it.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    previous_epoch: int
    owner: str
    previous_owner: str
    lease_expires_at: datetime
    mode: RecoveryMode
    reason: RecoveryReason
    deadline: datetime | None = None


class AttemptAdopted(Event, tag="core.execution.adopted", frozen=True, kw_only=True):
    """The executor's recover found the attempt's work and attached to it (fenced write).

    From here the recovered segment counts as launched: controls may be dispatched to it.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int


class AttemptLost(Event, tag="core.execution.lost", frozen=True, kw_only=True):
    """Recovery found trusted evidence the attempt no longer runs and no result: it is lost.

    Appended with the `core.execution.released` of its lease (reason `lease_expired`).
    Losing an attempt is the host's failure, not the Work's: only Work admitted as
    `idempotent` or `deduplicated`, with `retry_on_lost`, goes to retry wait; otherwise the
    Work fails with blocked reason `lost`.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    evidence: str = "not_running"


class AttemptRecoveryFailed(Event, tag="core.execution.recovery_failed", frozen=True, kw_only=True):
    """Recovery claimed the attempt, but its executor found no evidence of it: its
    `recover` answered `unknown` (`evidence` `unknown`) or failed (`error`).

    Appended, fenced at the recovery's epoch, with the attempt's `core.execution.failed`
    (code `recovery_failed`, `holds_resources`: no proof nothing of it runs) and the retry
    timer its policy arms, so the attempt is not recovered again every lease: the host
    stops it through its executor and confirms the stop (`core.execution.stop_confirmed`)
    before anything replaces it. `failures` counts the Work's failed recoveries in a row,
    this one included (its attempts that ended `recovery_failed`, back to the last that
    ended otherwise); when it reaches `limit`
    (`settings.recovery_failure_limit`) the Work is also held (`core.work.held`, kind
    `recovery_exhausted`).
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    attempt: int
    epoch: int
    evidence: Literal["unknown", "error"] = "unknown"
    failures: int = 1
    limit: int = 3


class WorkHeld(Event, tag="core.work.held", frozen=True, kw_only=True):
    """A hold stops the Work from starting (or relaunching) until it is released.

    `kind` says whose hold it is (`crash_loop`, `recovery_exhausted`, `budget`, `gate`,
    `operator`), `holder`
    who may settle it and `reason` why, in words for the operator.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    kind: str
    reason: str
    holder: str = "rota"


class HoldReleased(Event, tag="core.work.released", frozen=True, kw_only=True):
    """A hold was released; the Work may start (or relaunch) again (identity
    `request/<id>` when released with a request id)."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "request/<id> (with a request id)"

    work_id: str
    kind: str
    released_by: str = "operator"
    reason: str = ""
