"""Events of admission: scope capacity fences, budgets and their ledgers, start gates,
and cancelled Work."""

from typing import ClassVar, Literal

import msgspec

from rota.domain.events.base import Event

Period = Literal["lifetime", "day", "week"]
Per = Literal["work", "scope", "all"]


class Budget(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """At most `max` of `unit` per Work, per scope or across all, over a period.

    `id` names the budget and its ledgers, never its limit: changing `max` keeps what the
    ledgers were charged (and a limit lowered below it holds the next start). A budget
    configured without an id is named by its unit, per, period and scope.
    """

    id: str
    unit: str
    max: float
    per: Per = "work"
    period: Period = "lifetime"
    scope: str | None = None
    warn_at: float | None = None


class Charge(msgspec.Struct, frozen=True, gc=False):
    """An amount charged to one ledger: a budget, a ledger key and a window."""

    budget: str
    ledger: str
    window: str
    unit: str
    amount: float


class ScopeCapacityClaimed(Event, tag="core.capacity.scope_claimed", frozen=True, kw_only=True):
    """Slots under a scope's concurrency limit were taken (fences racing claims)."""

    stream_pattern: ClassVar[str] = "scope/<scope>"

    scope: str
    executions: list[str]


class BudgetsConfigured(Event, tag="core.budget.configured", frozen=True, kw_only=True):
    """The budgets in force from this position on (recorded when the configuration changes).

    A ledger counts from the position its budget is first configured; with no budgets,
    nothing is staged or charged.
    """

    stream_pattern: ClassVar[str] = "budget/ledgers"

    budgets: list[Budget]


class BudgetCharged(Event, tag="core.budget.charged", frozen=True, kw_only=True):
    """Amounts charged to ledgers: at admission (turns, attempts) or for staged usage.

    `source` is the log position of the outcome whose usage is charged (0 at admission);
    the delivery identity makes each staged usage charge at most once.
    """

    stream_pattern: ClassVar[str] = "budget/ledgers"
    delivery_pattern: ClassVar[str | None] = (
        "charge/<execution>/<epoch>/admission | charge/usage/<source>"
    )

    work_id: str
    execution: str
    source: int
    charges: list[Charge]


class _BudgetNotice(Event, frozen=True, kw_only=True):
    stream_pattern: ClassVar[str] = "budget/notices"
    delivery_pattern: ClassVar[str | None] = (
        "budget-notice/<kind>/<budget>/<ledger>/<window>/<scope>/<limit>"
    )

    budget: str
    ledger: str
    window: str
    scope: str
    work: str
    unit: str
    used: float
    limit: float
    per_limit: bool = False


class BudgetWarning(_BudgetNotice, tag="core.budget.warning", frozen=True, kw_only=True):
    """A charge left a ledger at or past a budget's `warn_at` fraction of its `max`.

    Once per ledger window, limit and scope, in the charged Work's scope (a `per = "all"`
    ledger tells each scope in its own). It names the Work in its data but is not addressed
    to it: it never becomes input. `per_limit` is true on notices kept per limit (the
    identity ends with the limit); one written before (false, no `/<limit>`) stood for
    every limit of its window and still does.
    """


class BudgetExceeded(_BudgetNotice, tag="core.budget.exceeded", frozen=True, kw_only=True):
    """A charge left a ledger at or past a budget's `max`, or a start found it there (the
    hold path, for a limit lowered below what was used). Once per ledger window, limit and
    scope, as `core.budget.warning`."""


class BudgetHeld(Event, tag="core.budget.held", frozen=True, kw_only=True):
    """A start over a reached budget was refused (`over_budget`) and the Work held.

    Input keeps queueing while it is held. Releasing the hold (`rota release WORK`) grants
    exactly one admission pass; the turn after it is checked again.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    budget: str
    ledger: str
    window: str
    reason: str


class GateHeld(Event, tag="core.gate.held", frozen=True, kw_only=True):
    """A start gate held the Work's first start (`gate_held`); only that gate settles it."""

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    registration: str
    reason: str


class GateReleased(Event, tag="core.gate.released", frozen=True, kw_only=True):
    """The holding gate admitted the Work: the hold is gone and the next start skips the
    gates once (the pass survives a budget hold). Settled with a request id, its identity
    is `request/<id>` (a repeat of that request answers with this event)."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "gate/<work>/<registration>/released | request/<id>"

    work_id: str
    registration: str
    reason: str = ""


class GateRefused(Event, tag="core.gate.refused", frozen=True, kw_only=True):
    """The holding gate refused the Work: it is cancelled (identity `request/<id>` when
    settled with a request id)."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "gate/<work>/<registration>/refused | request/<id>"

    work_id: str
    registration: str
    reason: str = ""


class WorkCancelled(Event, tag="core.work.cancelled", frozen=True, kw_only=True):
    """The Work was cancelled: no further attempt, input or retry; terminal.

    Cancelled with a request id (`Idempotency-Key`, `request_id`), its identity is
    `request/<id>`: a repeat of that request answers with this event, appending nothing."""

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "request/<id> (with a request id)"

    work_id: str
    reason: str = ""
    by: str = "operator"
