"""The root of rota's error tree, the domain's typed refusals and their codes.

Every error rota raises on purpose derives from `RotaError` and carries a stable `code`
(`lease_lost`, `over_budget`, `concurrency_conflict` ...) that the CLI, the HTTP API and
`doctor` show verbatim, so scripts can match on it while the message stays free to improve.
The codes are members of one `ErrorCode` enum per boundary (`DomainCode` here; the ports',
the entry points' and replay's in their layers), so code, CLI and docs/errors.md cannot
drift; a code raised in two layers belongs to the inner one.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Base of every boundary's codes: a member is its own string (`code == "idle"`)."""


class DomainCode(ErrorCode):
    """The domain's codes: refusals of its decisions, and why admission held Work back."""

    # -- the base of each error class
    ROTA_ERROR = "rota_error"
    """A deliberate error that names no more precise code: read its message."""
    REFUSED = "refused"
    """A decision refused the command in the current state; nothing was appended."""
    INVALID_COMMAND = "invalid_command"
    """A command's own content is invalid (a too long reason, an unknown alias): fix it."""
    SCHEMA_ERROR = "schema_error"
    """An event could not be encoded or decoded against the current schema."""
    LEASE_LOST = "lease_lost"
    """A write named an epoch that is no longer current: stop the launch, do not retry it."""
    NOT_ELIGIBLE = "not_eligible"
    """The Work cannot start now (running, waiting for a retry, held): wait or look at it."""

    # -- Work and its input
    UNKNOWN_WORK = "unknown_work"
    """No Work has the id given: check the id, or submit the Work first."""
    WORK_TERMINAL = "work_terminal"
    """The Work is already completed, failed or cancelled; it takes no more commands."""
    WORK_CONFLICT = "work_conflict"
    """A Work of that id exists with another definition: choose a new id."""
    INVALID_WORK = "invalid_work"
    """The Work definition does not match its schema (the message names the field)."""
    INVALID_WORK_ID = "invalid_work_id"
    """A Work id does not match the allowed pattern (shown in the message)."""
    INVALID_SCOPE = "invalid_scope"
    """A scope is not a path like root/team/project."""
    INVALID_KEY = "invalid_key"
    """An input key does not match its pattern; from replay, a signing key is unreadable."""
    IDLE = "idle"
    """The Work has no pending input to start an attempt with: submit input."""

    # -- attempts, leases, launches and retries
    INVOKED = "invoked"
    """The launch of this segment was already invoked; it is never invoked twice."""
    INVALID_PHASE = "invalid_phase"
    """A launch phase name does not match its pattern (shown in the message)."""
    TOO_MANY_PHASES = "too_many_phases"
    """A segment already recorded MAX_LAUNCH_PHASES launch phases; later ones are not kept."""
    PHASE_NOT_BEGUN = "phase_not_begun"
    """A launch phase's end names no open phase of the segment (its beginning was refused)."""
    METADATA_TOO_LARGE = "metadata_too_large"
    """An executor's recovery metadata is over its size limit: record less."""
    NOT_DUE = "not_due"
    """A deadline or retry timer is not due yet: it fires at the time in the message."""
    NOT_CURRENT = "not_current"
    """The attempt named is not the Work's current attempt."""
    NOT_ENDED = "not_ended"
    """The attempt has not ended, so its stop cannot be confirmed yet."""
    NO_TIMER = "no_timer"
    """The Work has no armed retry timer to fire."""
    RETRY_LIVE = "retry_live"
    """A manual retry while an attempt or wait is live: retry after it ends."""
    NOTHING_TO_RETRY = "nothing_to_retry"
    """A manual retry of Work that has no failure to retry."""
    INVALID_PAGE = "invalid_page"
    """A page size of a cadence scan (recovery, retry timers) outside 1..64."""

    # -- results an executor reports
    INVALID_RESULT = "invalid_result"
    """A result is malformed (a bad error code, a long message, hints on success)."""
    INVALID_USAGE = "invalid_usage"
    """A result's usage has a bad or reserved unit, or an amount that is not finite and >= 0."""
    INVALID_TURN = "invalid_turn"
    """A result's turn is not an object with a valid status and a short string comment."""
    PAYLOAD_TOO_LARGE = "payload_too_large"
    """Input or result data is over its encoded size limit: store less, or a reference."""
    PAYLOAD_TOO_DEEP = "payload_too_deep"
    """Input or result data is nested deeper than allowed: flatten it."""
    INVALID_WAIT = "invalid_wait"
    """A waiting result's wait predicate is malformed (a bad key or name, a schema keyword
    outside the supported subset): the message names the field."""
    NOT_JSON = "not_json"
    """Input or result data holds a value JSON cannot hold exactly (NaN, a set, lone surrogates)."""
    INVALID_ARTIFACT = "invalid_artifact"
    """A result's artifact reference is malformed (name, URI scheme, credentials in the URI,
    digest, size) or repeats a name: fix the reference named."""

    INVALID_FLOW = "invalid_flow"
    """A priority, a concurrency key, a rate, a throttle or a flow rule is malformed, or a
    pause names nothing that can pause: the message names the value and its form."""
    NOT_PAUSED = "not_paused"
    """A resume names a pool, key or scope that is not paused: `rota paused` lists those
    that are."""
    INVALID_GRANT = "invalid_grant"
    """A submit names a binding grant that is malformed or repeated, or too many (16 at most)."""
    INVALID_PERSONAL = "invalid_personal"
    """A personal field path is malformed, or marks a field of a payload (or of a value on the
    path) that is not an object: mark dotted paths into an object payload."""

    # -- configuration values the domain validates
    INVALID_CONFIG = "invalid_config"
    """The configuration (file, budgets, retry, environment) is invalid: fix the field named."""

    # -- holds, gates and controls
    NOT_HELD = "not_held"
    """The Work has no hold of that kind to release or settle."""
    NOT_HOLDER = "not_holder"
    """Only the start gate that holds the Work can settle its hold."""
    GATE_HOLD = "gate_hold"
    """An operator cannot release a start gate's hold: its gate settles it, or cancel the Work."""
    NOT_RELEASABLE = "not_releasable"
    """This hold is settled only by its holder: cancel the Work instead."""
    NO_LIVE_ATTEMPT = "no_live_attempt"
    """A control for Work that has no running attempt."""
    UNSUPPORTED_CONTROL = "unsupported_control"
    """The attempt's executor did not declare this control (inject, interrupt) when it started."""
    UNKNOWN_CONTROL = "unknown_control"
    """The Work has no control intent of that name."""
    NOT_DISPATCHABLE = "not_dispatchable"
    """The control intent cannot be dispatched now (already dispatched or settled)."""
    STALE_TOKEN = "stale_token"
    """A control is not dispatched under the token given: a newer dispatch took it over."""
    TARGET_ENDED = "target_ended"
    """The attempt an inject was meant for has ended."""

    # -- schedules
    INVALID_SCHEDULE = "invalid_schedule"
    """A schedule definition is invalid (its spec, name, policy or duration): fix the field."""
    UNKNOWN_TIMEZONE = "unknown_timezone"
    """A schedule names a time zone that is not an IANA name (Europe/Berlin, UTC)."""
    UNKNOWN_SCHEDULE = "unknown_schedule"
    """No schedule has that name (or it was removed): check `rota schedule list`."""
    SCHEDULE_QUARANTINED = "schedule_quarantined"
    """A stored schedule could not be read and fires no more: redefine it (`rota schedule
    apply`) or resume it after fixing what its quarantine event names."""

    # -- why admission held ready Work back this pass (waiting, not raised)
    CAPACITY_CONCURRENCY = "capacity_concurrency"
    """Waiting: the Work's pool is at `concurrency`; it starts when a slot frees."""
    CAPACITY_JOB_CONCURRENCY = "capacity_job_concurrency"
    """Waiting: the `jobs` pool is at `job_concurrency`; it starts when a slot frees."""
    CAPACITY_POOL = "capacity_pool"
    """Waiting: the executor's own pool is at its `pool_limits` entry; it starts when one frees."""
    CAPACITY_SCOPE = "capacity_scope"
    """Waiting: the Work's scope or an ancestor is at its concurrency limit."""
    START_GATE = "start_gate"
    """Waiting: the start gates are being asked, or could not decide (nothing is held)."""
    GATE_HELD = "gate_held"
    """Waiting: a start gate holds the Work (`core.gate.held`) until it is settled."""
    WAIT_UNJUDGED = "wait_unjudged"
    """Waiting: a parked attempt's named wait predicate is asked about new input first."""
    OVER_BUDGET = "over_budget"
    """Waiting: a budget ledger is at its max (`core.budget.held`): raise it or release the hold."""
    CAPACITY_KEY = "capacity_key"
    """Waiting: a concurrency key of the Work is at its limit (`[[keys]]`); it starts when a
    slot under that key frees. Work of other keys is not held back."""
    RATE_LIMITED = "rate_limited"
    """Waiting: a rate bucket of the Work (`[[rates]]`, or its throttle) has too few tokens;
    the message says when the next one is due."""
    FLOW_PAUSED = "flow_paused"
    """Waiting: the Work's pool, a key or its scope is paused (`rota pause`); nothing is
    deleted, and it starts once resumed."""
    DEBOUNCED = "debounced"
    """Waiting: the Work's debounce window is open (`debounce=`); it starts when no submit
    on its key came for `wait` seconds, or `max_wait` after the window opened."""


class RotaError(Exception):
    """Base of every error rota raises deliberately; `code` is stable, the message is not."""

    # An `ErrorCode` member on every error rota raises (a test checks that no product module
    # passes a literal); a plain string only where a user names the code (`rota.Fail`).
    code: ErrorCode | str = DomainCode.ROTA_ERROR

    def __init__(self, message: str, *, code: ErrorCode | str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class Refusal(RotaError):
    """A decision refused a command: the state does not allow it. Nothing was appended."""

    code = DomainCode.REFUSED


class InvalidCommand(Refusal):
    """A command's own content is invalid (a bad id, a malformed status, a negative amount)."""

    code = DomainCode.INVALID_COMMAND


class SchemaError(RotaError):
    """An event could not be encoded or decoded against the current schema."""

    code = DomainCode.SCHEMA_ERROR


class LeaseLost(Refusal):
    """A write on behalf of an attempt named an epoch that is no longer current.

    The lease expired, was released, or a newer epoch recovered the attempt; the write was
    refused and nothing was appended. A launch running under that lease must stop.
    """

    code = DomainCode.LEASE_LOST


class NotEligible(Refusal):
    """The Work cannot start now (nothing pending, running, waiting for a retry, held)."""

    code = DomainCode.NOT_ELIGIBLE
