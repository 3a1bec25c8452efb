"""Budgets: ledgers per Work, scope or everything, windows, charges and notices. Pure.

A budget caps what Work consumes in a unit (`usd`, `tokens`, `minutes`, or `turns` and
`attempts`, which rota counts itself) per Work, per scope or across every scope, over the
ledger's life or each UTC day or ISO week (Monday 00:00 UTC to Monday). A start is refused
(and the Work held) when an applicable ledger has reached its max. A charge that leaves a
ledger at or past `warn_at` or `max` emits a notice in the charged Work's scope, once per
ledger window, kind, limit and scope: a `per = "all"` ledger is shared by every scope, so
each scope is told in its own scope, by the first charge (or held start) of a Work in it.

A budget's identity (its id, which names its ledgers) never includes its `max`: a budget
configured without an id is named by its unit, per, period and scope (`derived_id`), so
raising or lowering the limit keeps what was charged. Releases before this rule derived ids
with the max in them (`usd-work-day-50`); `keep_ids` carries such an id in force over to
the id-less budget it now names, so an upgraded log keeps its ledgers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import msgspec

from rota.domain.emit import Emit
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events.admission import Budget, BudgetExceeded, BudgetWarning, Charge
from rota.domain.results import UNIT_PATTERN

Used = Callable[[str, str, str], float]
CORE_UNITS = frozenset({"turns", "attempts"})
BUDGET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def validate(budgets: Iterable[Budget], where: str = "budgets") -> None:
    """Refuse budgets that cannot work, naming the field."""
    seen: set[str] = set()
    for index, budget in enumerate(budgets):
        field = f"{where}[{index}]"
        if not BUDGET_ID.fullmatch(budget.id):
            raise InvalidCommand(
                f"{field}.id {budget.id!r} is not a valid id", code=DomainCode.INVALID_CONFIG
            )
        if budget.id in seen:
            raise InvalidCommand(
                f"{field}.id {budget.id!r} is used twice", code=DomainCode.INVALID_CONFIG
            )
        seen.add(budget.id)
        if budget.unit not in CORE_UNITS and not UNIT_PATTERN.fullmatch(budget.unit):
            raise InvalidCommand(
                f"{field}.unit {budget.unit!r} must match {UNIT_PATTERN.pattern}",
                code=DomainCode.INVALID_CONFIG,
            )
        if not budget.max > 0:
            raise InvalidCommand(f"{field}.max must be > 0", code=DomainCode.INVALID_CONFIG)
        if budget.warn_at is not None and not 0 < budget.warn_at < 1:
            raise InvalidCommand(
                f"{field}.warn_at is a fraction of max, between 0 and 1",
                code=DomainCode.INVALID_CONFIG,
            )
        if budget.per == "all" and budget.scope is not None:
            raise InvalidCommand(
                f'{field}.scope cannot narrow a per = "all" budget: its ledger is shared by '
                'every scope (use per = "scope" with scope = ...)',
                code=DomainCode.INVALID_CONFIG,
            )


def derived_id(budget: Budget) -> str:
    """The id of a budget configured without one: unit, per, period and scope, never max."""
    return f"{budget.unit}-{budget.per}-{budget.period}" + _scope_suffix(budget)


def _scope_suffix(budget: Budget) -> str:
    return f"-{budget.scope.replace('/', '.')}" if budget.scope else ""


def _legacy_derived(budget: Budget) -> bool:
    """Whether `budget.id` is what an earlier release derived for an id-less budget of its
    unit, per, period and scope: the same as `derived_id` with a max after the period."""
    prefix = re.escape(f"{budget.unit}-{budget.per}-{budget.period}-")
    found = re.fullmatch(
        prefix + r"([0-9][0-9.e+-]*|inf)" + re.escape(_scope_suffix(budget)), budget.id
    )
    if found is None:
        return False
    try:
        return float(found[1]) > 0
    except ValueError:
        return False


def keep_ids(wanted: Iterable[Budget], in_force: Iterable[Budget]) -> tuple[Budget, ...]:
    """`wanted`, where a budget configured without an id (its id is `derived_id`) takes the
    id in force for its unit, per, period and scope if an earlier release derived that id
    with the max in it, so its ledgers (and notices) go on across the upgrade and any later
    change of its max. An id another wanted budget names is never taken."""
    wanted, in_force = tuple(wanted), tuple(in_force)
    taken = {budget.id for budget in wanted}
    kept: list[Budget] = []
    for budget in wanted:
        old = None
        if budget.id == derived_id(budget):
            old = next((o for o in in_force if _renamed(o, budget) and o.id not in taken), None)
        if old is None:
            kept.append(budget)
        else:
            taken.add(old.id)
            kept.append(msgspec.structs.replace(budget, id=old.id))
    return tuple(kept)


def _renamed(old: Budget, budget: Budget) -> bool:
    """Whether `old` is `budget` under an id an earlier release derived with its max."""
    return _identity(old) == _identity(budget) and _legacy_derived(old)


def _identity(budget: Budget) -> tuple[str, str, str, str | None]:
    return budget.unit, budget.per, budget.period, budget.scope


def window(budget: Budget, at: datetime) -> str:
    """The ledger window `at` falls in: lifetime, a UTC day, or an ISO week (UTC)."""
    # Windows are UTC whatever zone a time arrives in (a naive time is taken as UTC).
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if budget.period == "day":
        return at.date().isoformat()
    if budget.period == "week":
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    return "lifetime"


def applies(budget: Budget, scope: str) -> bool:
    return budget.scope is None or scope == budget.scope or scope.startswith(budget.scope + "/")


def ledger(budget: Budget, work_id: str, scope: str) -> str:
    if budget.per == "work":
        return f"work:{work_id}"
    if budget.per == "scope":
        return f"scope:{budget.scope or scope}"
    return "all"


def reached(
    budgets: Iterable[Budget], work_id: str, scope: str, at: datetime, used: Used
) -> tuple[Budget, str, str, float] | None:
    """The first applicable budget whose ledger has reached its max, if any."""
    for budget in budgets:
        if not applies(budget, scope):
            continue
        key, win = ledger(budget, work_id, scope), window(budget, at)
        total = used(budget.id, key, win)
        if total >= budget.max:
            return budget, key, win, total
    return None


def charges_for(
    budgets: Iterable[Budget],
    work_id: str,
    scope: str,
    at: datetime,
    amounts: dict[str, float],
) -> list[Charge]:
    """What `amounts` (unit -> amount) charges to each applicable ledger."""
    out: list[Charge] = []
    for budget in budgets:
        amount = amounts.get(budget.unit)
        if amount and applies(budget, scope):
            out.append(
                Charge(
                    budget.id,
                    ledger(budget, work_id, scope),
                    window(budget, at),
                    budget.unit,
                    float(amount),
                )
            )
    return out


def notices(
    budgets: Iterable[Budget],
    charges: Iterable[Charge],
    work_id: str,
    scope: str,
    used: Used,
    sent: set[str],
) -> list[Emit]:
    """The warning/exceeded notices due after the charges, in the Work's scope.

    A notice is due when a charge leaves its ledger at or past the threshold (`warn_at` of
    `max`, or `max`; a warning only while the ledger was below `max` before the charge) and
    its identity is not in `sent` (the log's and this decision's); those returned are added
    to `sent`. So each limit notifies once per window and scope: the charge that crosses it,
    then the first charge of a Work in another scope of a shared ledger.
    """
    by_id = {b.id: b for b in budgets}
    out: list[Emit] = []
    for charge in charges:
        budget = by_id[charge.budget]
        before = used(charge.budget, charge.ledger, charge.window)
        after = before + charge.amount
        due: list[str] = []
        warn_at = budget.warn_at
        if warn_at is not None and before < budget.max and warn_at * budget.max <= after:
            due.append("warning")
        if budget.max <= after:
            due.append("exceeded")
        for kind in due:
            emit = notice(kind, budget, charge, scope, work_id, after)
            if fresh(emit, sent):
                out.append(emit)
    return out


def notice(
    kind: str, budget: Budget, charge: Charge, scope: str, work_id: str, used: float
) -> Emit:
    cls = BudgetWarning if kind == "warning" else BudgetExceeded
    event = cls(
        budget=budget.id,
        ledger=charge.ledger,
        window=charge.window,
        scope=scope,
        work=work_id,
        unit=budget.unit,
        used=used,
        limit=budget.max,
        per_limit=True,
    )
    return Emit("budget/notices", event, notice_identity(event))


def notice_identity(event: BudgetWarning | BudgetExceeded, *, legacy: bool = False) -> str:
    """A notice's delivery identity: kind, budget, ledger, window, scope and limit.

    A notice written before notices were kept per limit (`per_limit` false) has the same
    identity without the limit (also given with `legacy=True`)."""
    kind = "warning" if isinstance(event, BudgetWarning) else "exceeded"
    base = f"budget-notice/{kind}/{event.budget}/{event.ledger}/{event.window}/{event.scope}"
    if legacy or not event.per_limit:
        return base
    return f"{base}/{_number(event.limit)}"


def fresh(emit: Emit, sent: set[str]) -> bool:
    """Whether a notice is still to be sent: neither its identity nor the identity an
    earlier release gave it (which stood for every limit of its window) is in `sent`.
    Marks it sent."""
    event = emit.event
    assert isinstance(event, BudgetWarning | BudgetExceeded)
    identity = notice_identity(event)
    if identity in sent or notice_identity(event, legacy=True) in sent:
        return False
    sent.add(identity)
    return True


def _number(value: float) -> str:
    """A limit as the shortest text that reads back as the same number (`50`, `0.5`)."""
    return repr(float(value)).removesuffix(".0")
