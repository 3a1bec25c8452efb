"""Invariants of budgets: the ledgers hold exactly the charges due, each once, and no start
is admitted past a reached limit (seed 001, "Budgets").

The ledger state is folded from the budget events themselves: the budgets in force
(`core.budget.configured`), each ledger's total (the sum of `core.budget.charged`), the
usage staged by outcomes and not yet charged, and each start's admission charge. What a
charge must be is recomputed with the domain's definitions of a ledger, its window and
which budgets apply (`rota.domain.budgets`).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from rota.application.ports import RecordedEvent
from rota.domain import budgets as bg
from rota.domain.events import (
    OUTCOMES,
    AttemptClaimed,
    AttemptResumed,
    BudgetCharged,
    BudgetsConfigured,
)
from rota.domain.events.admission import Budget, Charge
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Model

Key = tuple[str, str, str]  # (budget, ledger, window)


class Ledgers:
    """The budget state both budget invariants read, folded by `BudgetLedgerBalanced`."""

    def __init__(self) -> None:
        self.budgets: tuple[Budget, ...] = ()
        self.totals: dict[Key, float] = {}
        # outcome position -> (work, execution, usage, recorded time)
        self.staged: dict[int, tuple[str, str, dict[str, float], datetime]] = {}
        self.admissions: dict[str, tuple[int, list[Charge]]] = {}  # execution -> charge

    def add(self, charges: list[Charge]) -> None:
        for c in charges:
            key = (c.budget, c.ledger, c.window)
            self.totals[key] = self.totals.get(key, 0.0) + c.amount


class BudgetLedgerBalanced(Invariant):
    """Budget ledgers equal the sum of the charges due: each start's turns and attempts,
    and each outcome's usage, charged once.

    Seed 001 (001_a97b7b12fa97a199.txt): "putAttemptState stages the part of an attempt's usage that
    is not yet staged [...] so a finish, park, failure or timeout each charge it once. Staged usage
    is charged to the ledgers [...] at the next Start or Scheduler.SettleBudgets" and "An admitted
    turn is charged one turns, and one attempts when it creates an execution." So a usage charge
    answers a staged outcome not charged before, with exactly its usage per applicable budget; a
    start under budgets that count turns or attempts comes with its admission charge; changing the
    budgets first charges what was staged; and at rest nothing staged is left uncharged. `ledgers()`
    gives the totals, to compare with a projection's.
    """

    name = "budget_ledger_balanced"
    events = (BudgetsConfigured, BudgetCharged, *OUTCOMES, AttemptClaimed, AttemptResumed)

    def __init__(self) -> None:
        self.state = Ledgers()

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at, state = recorded.event, recorded.position, self.state
        if isinstance(event, BudgetsConfigured):
            found = [
                self.violation(
                    f"budgets changed while the usage of {execution} was left uncharged",
                    source,
                    at,
                )
                for source, (_, execution, _, _) in sorted(state.staged.items())
            ]
            state.budgets = tuple(event.budgets)
            if not state.budgets:
                state.staged.clear()
            return found
        if isinstance(event, BudgetCharged):
            state.add(event.charges)
            if event.source == 0:
                state.admissions[event.execution] = (at, list(event.charges))
                return []
            return self._usage(event, at, model)
        if isinstance(event, AttemptClaimed | AttemptResumed):
            return self._admission(recorded, event, model)
        usage = getattr(event, "usage", None)
        if state.budgets and usage:
            execution = f"{getattr(event, 'work_id', '')}/{getattr(event, 'attempt', 0)}"
            work_id = getattr(event, "work_id", "")
            state.staged[at] = (work_id, execution, dict(usage), recorded.recorded_time)
        return []

    def _usage(self, event: BudgetCharged, at: int, model: Model) -> list[Violation]:
        staged = self.state.staged.pop(event.source, None)
        if staged is None:
            return [
                self.violation(
                    f"usage of {event.execution} charged from position {event.source}, which "
                    "holds no usage left to charge (charged twice, or never staged)",
                    event.source,
                    at,
                )
            ]
        work_id, execution, usage, when = staged
        if execution != event.execution:
            return [
                self.violation(
                    f"the usage of {execution} was charged as {event.execution}", event.source, at
                )
            ]
        work = model.works.get(work_id)
        scope = work.scope if work is not None else "root"
        due = bg.charges_for(self.state.budgets, work_id, scope, when, usage)
        if due != list(event.charges):
            return [
                self.violation(
                    f"usage of {execution} charged {_show(event.charges)}; its usage "
                    f"{usage} is due as {_show(due)}",
                    event.source,
                    at,
                )
            ]
        return []

    def _admission(
        self, recorded: RecordedEvent, event: AttemptClaimed | AttemptResumed, model: Model
    ) -> list[Violation]:
        execution = f"{event.work_id}/{event.attempt}"
        taken = self.state.admissions.pop(execution, None)
        work = model.works.get(event.work_id)
        if not self.state.budgets or work is None:
            return []
        amounts = {"turns": 1.0, "attempts": 1.0 if isinstance(event, AttemptClaimed) else 0.0}
        due = bg.charges_for(
            self.state.budgets, event.work_id, work.scope, recorded.recorded_time, amounts
        )
        charged = list(taken[1]) if taken is not None else []
        if _amounts(due) == _amounts(charged):
            return []
        return [
            self.violation(
                f"start of {execution} charged {_show(charged)}; due {_show(due)}",
                taken[0] if taken is not None else None,
                recorded.position,
            )
        ]

    def at_rest(self, now: datetime, model: Model) -> list[Violation]:
        if not self.state.budgets:
            return []
        return [
            self.violation(f"the usage of {execution} was never charged", source)
            for source, (_, execution, _, _) in sorted(self.state.staged.items())
        ]

    def ledgers(self) -> dict[Key, float]:
        """Each ledger's total: the sum of every charge recorded to it."""
        return dict(self.state.totals)

    def compare(self, ledgers: dict[Key, float], position: int) -> list[Violation]:
        """Violations where a projection's `ledgers` (at `position`) differ from the sum of
        the charges (for the driver: live projection versus the log)."""
        mine = self.state.totals
        return [
            self.violation(
                f"ledger {key} holds {ledgers.get(key, 0.0):g}; its charges sum to "
                f"{mine.get(key, 0.0):g}",
                position,
            )
            for key in sorted(set(mine) | set(ledgers))
            if abs(mine.get(key, 0.0) - ledgers.get(key, 0.0)) > 1e-9
        ]


class BudgetHeldAtMax(Invariant):
    """No start is admitted while an applicable ledger has reached its max, but for the one
    start a released budget hold lets through.

    Seed 001 (001_a97b7b12fa97a199.txt): "Start refuses a turn when an applicable ledger has reached
    its Max." and "Releasing a budget hold (Control.ReleaseWork) leaves a pass that covers the first
    admission after it, over budget or not [...] the turn after is checked again." The ledger is
    read before the start's own admission charge, in the window of the start's time (the charge's
    own window where it has one).
    """

    name = "budget_held_at_max"
    events = (BudgetCharged, AttemptClaimed, AttemptResumed)

    def __init__(self, balanced: BudgetLedgerBalanced) -> None:
        self.state = balanced.state
        self.pending: dict[str, list[Charge]] = {}  # execution -> its admission charges

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = recorded.event
        if isinstance(event, BudgetCharged):
            if event.source == 0:
                self.pending[event.execution] = list(event.charges)
            return []
        assert isinstance(event, AttemptClaimed | AttemptResumed)
        execution = f"{event.work_id}/{event.attempt}"
        own = self.pending.pop(execution, [])
        work = model.works.get(event.work_id)
        if work is None or not self.state.budgets or work.budget_pass:
            return []
        windows = {c.budget: c.window for c in own}
        mine = Counter({(c.budget, c.ledger, c.window): c.amount for c in own})
        for budget in self.state.budgets:
            if not bg.applies(budget, work.scope):
                continue
            ledger = bg.ledger(budget, event.work_id, work.scope)
            window = windows.get(budget.id) or bg.window(budget, recorded.recorded_time)
            key = (budget.id, ledger, window)
            before = self.state.totals.get(key, 0.0) - mine.get(key, 0.0)
            if before >= budget.max:
                return [
                    self.violation(
                        f"{execution} started while ledger {ledger} of budget {budget.id} "
                        f"({window}) had reached {before:g} of {budget.max:g} {budget.unit}",
                        recorded.position,
                    )
                ]
        return []


def _amounts(charges: list[Charge]) -> Counter[tuple[str, str, str, float]]:
    """Charges compared by budget, ledger, unit and amount (a start's window is the time
    its decision read, which the log does not record)."""
    return Counter((c.budget, c.ledger, c.unit, c.amount) for c in charges)


def _show(charges: list[Charge]) -> str:
    if not charges:
        return "nothing"
    return ", ".join(f"{c.amount:g} {c.unit} to {c.budget}:{c.ledger}" for c in charges)
