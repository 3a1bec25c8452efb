"""The state of a Work and its attempts, as the fold of its events builds it.

All values are frozen and acyclic, so they are kept out of the cyclic garbage collector
(`gc=False`): with many Works in memory, collections otherwise dominate the run time.

Frozen values only; `rota.domain.evolve` returns a new `WorkState` per event. The Work's
`state` is derived, never stored, so it cannot disagree with the facts it comes from.
"""

from datetime import datetime
from typing import Any, Literal

import msgspec

from rota.domain.artifacts import Artifact
from rota.domain.events.work import NO_FLOW, FlowFields, WorkFlow
from rota.domain.policy import Pinned
from rota.domain.waits_types import WaitPredicate

AttemptStatus = Literal["starting", "running", "parked", "ended"]
Invoke = Literal["pending", "called"]
WorkStateName = Literal[
    "idle", "ready", "running", "waiting", "retry_wait", "held", "completed", "failed", "cancelled"
]


class PendingInput(msgspec.Struct, frozen=True, gc=False):
    """An accepted input; its log position is its acceptance sequence."""

    position: int
    key: str
    payload: Any = None
    correlation_key: str | None = None


class Phase(msgspec.Struct, frozen=True, gc=False):
    """One launch phase of a segment, written as it begins and again as it ends."""

    name: str
    began_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = None


class Segment(msgspec.Struct, frozen=True, gc=False):
    """A stretch of lease-held time of an attempt, with its launch phases and invoke marker."""

    kind: str
    epoch: int
    started_at: datetime
    ended_at: datetime | None = None
    invoke: Invoke | None = "pending"
    isolated: bool = False
    phases: tuple[Phase, ...] = ()
    wake: int | None = None
    adopted: bool = False
    owner: str = ""

    def active_seconds(self, until: datetime | None = None) -> float:
        end = self.ended_at or until
        return 0.0 if end is None else max(0.0, (end - self.started_at).total_seconds())


class AttemptState(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Attempt N of a Work: lease, pinned snapshot, segments, outcome, resource exclusion."""

    work_id: str
    number: int
    epoch: int
    owner: str
    lease_expires_at: datetime
    deadline: datetime
    pinned: Pinned
    consumed: tuple[PendingInput, ...]
    trigger: PendingInput | None
    claimed_at: datetime
    status: AttemptStatus = "starting"
    released: bool = False
    outcome: str | None = None
    ended_at: datetime | None = None
    stop_confirmed: bool = False
    segments: tuple[Segment, ...] = ()
    dropped_segments: int = 0
    dropped_active_seconds: float = 0.0
    remaining_seconds: float | None = None
    error_code: str | None = None
    error_message: str | None = None
    permanent: bool = False
    usage: dict[str, float] = msgspec.field(default_factory=dict)
    data: Any = None
    recovery_metadata: Any = None
    recovery_epoch: int | None = None
    relaunches: int = 0
    # While parked: the wait predicate its waiting outcome registered (None: any input
    # wakes it), and the input keys a named predicate was recorded to match, or not.
    wait: WaitPredicate | None = None
    wait_matched: tuple[str, ...] = ()
    wait_refused: tuple[str, ...] = ()
    # The binding grants this attempt took (`AttemptClaimed.grants`), kept by recovery and
    # resume; and the artifact references its outcomes recorded, oldest first.
    grants: tuple[str, ...] = ()
    artifacts: tuple[Artifact, ...] = ()

    @property
    def execution_id(self) -> str:
        return f"{self.work_id}/{self.number}"

    @property
    def live(self) -> bool:
        """Unfinished and not parked: the attempt is (or may be) running."""
        return self.status in ("starting", "running")

    @property
    def holds_slot(self) -> bool:
        """Holds a capacity slot: live, or ended with its stop not yet confirmed."""
        return self.live or (self.status == "ended" and not self.stop_confirmed)

    @property
    def launch_owner(self) -> str:
        """The owner that actually started the attempt's work: the holder of the last
        segment whose executor was called (or that adopted it); the claimant otherwise."""
        for segment in reversed(self.segments):
            if (segment.invoke == "called" or segment.adopted) and segment.owner:
                return segment.owner
        return self.owner

    @property
    def open_segment(self) -> Segment | None:
        if self.segments and self.segments[-1].ended_at is None:
            return self.segments[-1]
        return None


class Hold(msgspec.Struct, frozen=True, gc=False):
    """A reason the Work may not start: `crash_loop`, `recovery_exhausted`, `budget`, `gate`,
    `operator`."""

    kind: str
    reason: str
    holder: str
    position: int


class Control(msgspec.Struct, frozen=True, gc=False):
    """A control intent and where it stands.

    States: pending (waiting, undispatched), dispatched (a token is out), accepted (inject
    acknowledged), delivered (interrupt acknowledged), consumed (an outcome consumed the
    injected input), not_accepting, queued / dropped (failed: the fallback applied),
    superseded (its target ended first).
    """

    intent: str
    kind: str
    state: str
    attempt: int
    epoch: int
    position: int
    token: str | None = None
    dispatches: int = 0
    input_key: str | None = None
    input_position: int | None = None
    fallback: str = "queue"


class RetryState(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Failure accounting, kept apart from attempt numbers.

    `failures` is the automatic failure budget spent (a manual retry resets it);
    `generation` counts every retry timer ever armed, so timer identities never repeat;
    `failed_at` is the log position of the latest failure (a manual retry's boundary).
    """

    failures: int = 0
    generation: int = 0
    failed_at: int = 0
    next_due: datetime | None = None
    blocked_reason: str | None = None


class WorkState(msgspec.Struct, FlowFields, frozen=True, kw_only=True, gc=False):
    """A Work: its definition, pending input, attempts and retry accounting."""

    work_id: str
    scope: str
    binding: str
    kind: str
    trigger: str
    safety: str
    version: int
    submitted_at: datetime
    pending: tuple[PendingInput, ...] = ()
    attempts: tuple[AttemptState, ...] = ()
    retry: RetryState = RetryState()
    terminal: str | None = None
    holds: tuple[Hold, ...] = ()
    budget_pass: bool = False
    gate_pass: bool = False
    controls: tuple[Control, ...] = ()
    grants: tuple[str, ...] = ()  # the binding grants the Work opted into at submit
    # Flow control and coalescing (`WorkFlow`; `core.work.submitted`,
    # `core.work.reprioritized`, `core.submit.merged`), read through `FlowFields`
    # (`work.priority`, `work.keys`, ...); null on a Work that asks for none of them.
    flow: WorkFlow | None = None

    @property
    def current(self) -> AttemptState | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def state(self) -> WorkStateName:
        if self.terminal == "completed":
            return "completed"
        if self.terminal == "failed":
            return "failed"
        if self.terminal == "cancelled":
            return "cancelled"
        if self.holds:
            return "held"
        current = self.current
        if current is not None and current.live:
            return "running"
        if current is not None and current.status == "parked":
            return "waiting"
        if self.retry.next_due is not None:
            return "retry_wait"
        if self.retry.blocked_reason is not None:
            return "failed"
        return "ready" if self.pending else "idle"

    @property
    def startable(self) -> bool:
        """Eligible for a start (or a resume) now, capacity aside."""
        if self.terminal is not None or self.retry.next_due is not None or self.holds:
            return False
        if self.retry.blocked_reason is not None or not self.pending:
            return False
        current = self.current
        if current is None:
            return True
        if current.status == "parked":
            # Only input its wait predicate matches resumes a parked attempt; other input
            # stays queued (rota.domain.waits).
            return current.wait is None or bool(waking_inputs(self) or unjudged(self))
        # Replacement waits until the ended attempt's processes are known to have stopped.
        return current.status == "ended" and current.stop_confirmed


def with_flow(flow: WorkFlow | None, **changes: Any) -> WorkFlow | None:
    """`flow` with `changes` (None when the result asks for nothing)."""
    changed = msgspec.structs.replace(NO_FLOW if flow is None else flow, **changes)
    return None if changed == NO_FLOW else changed


from rota.domain.waits import unjudged, waking_inputs  # noqa: E402 (waits reads these types)
