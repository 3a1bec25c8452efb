"""Admission commands outside the start pass: budgets, ledgers, gates, cancellation."""

from __future__ import annotations

from collections.abc import Sequence

from rota.application.commands.requests import Asked, once
from rota.application.configuration import Configuration
from rota.application.ports import AppendResult
from rota.application.transactions import Transactions
from rota.domain import admission, budgets, gates
from rota.domain.emit import Emit, work_stream
from rota.domain.events import BudgetCharged, BudgetsConfigured
from rota.domain.events.admission import Budget
from rota.domain.events.flow import FlowConfigured
from rota.domain.flow import check_rules

_NONE = FlowConfigured()  # no rules: a log without flow control needs no event


class AdmissionCommands:
    """Admission's commands outside the start pass: budgets, ledgers, gates, cancellation."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config

    def configure_budgets(self, configured: Sequence[Budget]) -> bool:
        """Record the budgets in force when they differ from the log's; True if recorded.

        A budget configured without an id keeps the id an earlier release derived for it
        (`budgets.keep_ids`). Usage staged under the budgets in force is charged to them
        in the same append, before the new ones take over: a ledger counts from the time
        its budget is first configured, never usage that finished before."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            projection = self.tx.projection
            wanted = budgets.keep_ids(configured, projection.budgets)
            budgets.validate(wanted)
            if projection.budgets == wanted:
                return [], {}
            emits = self._settlements(len(projection.staged))
            emits.append(Emit(admission.LEDGERS, BudgetsConfigured(budgets=list(wanted))))
            return emits, {admission.LEDGERS: projection.ledger_version}

        return self.tx.transact(decide).written > 0

    def configure_flow(self, configured: FlowConfigured) -> bool:
        """Record the key and rate rules in force when they differ from the log's (True if
        recorded); fenced by the `flow/config` stream, so racing hosts record it once."""
        check_rules(configured.keys, configured.rates, configured.share, configured.scopes)

        def decide() -> tuple[list[Emit], dict[str, int]]:
            flow = self.tx.projection.flow
            if flow.config == configured or (flow.config is None and configured == _NONE):
                return [], {}
            return [Emit("flow/config", configured)], {"flow/config": flow.config_version}

        return self.tx.transact(decide).written > 0

    def settle_pass(self, limit: int = 512) -> int:
        """Charge staged usage to the ledgers (each outcome once); returns how many."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            emits = self._settlements(limit)
            if not emits:
                return [], {}
            return emits, {admission.LEDGERS: self.tx.projection.ledger_version}

        return self.tx.transact(decide).written

    def _settlements(self, limit: int) -> list[Emit]:
        """The charges (and notices) of up to `limit` staged usages, oldest first."""
        projection = self.tx.projection
        if not projection.staged or not projection.budgets:
            return []
        emits: list[Emit] = []
        charged: dict[tuple[str, str, str], float] = {}
        sent = set(projection.notified)

        def used(budget: str, ledger: str, window: str) -> float:
            return projection.used(budget, ledger, window) + charged.get(
                (budget, ledger, window), 0.0
            )

        for source in sorted(projection.staged)[:limit]:
            work_id, execution, usage, at = projection.staged[source]
            scope = projection.works[work_id].scope
            charges = budgets.charges_for(projection.budgets, work_id, scope, at, usage)
            emits.extend(budgets.notices(projection.budgets, charges, work_id, scope, used, sent))
            for c in charges:
                key = (c.budget, c.ledger, c.window)
                charged[key] = charged.get(key, 0.0) + c.amount
            event = BudgetCharged(
                work_id=work_id, execution=execution, source=source, charges=charges
            )
            emits.append(Emit(admission.LEDGERS, event, f"charge/usage/{source}"))
        return emits

    def settle_gate(
        self,
        work_id: str,
        registration: str,
        *,
        admit: bool,
        reason: str = "",
        request_id: str | None = None,
    ) -> AppendResult:
        """The holding gate admits (release, one pass) or refuses (cancels) the Work.

        With a `request_id`, the settlement is recorded under `request/<id>` and a repeat
        answers with it (`rota.application.commands.requests`)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.projection.works.get(work_id)
            decision = "released" if admit else "refused"
            identity = f"gate/{work_id}/{registration}/{decision}"
            holding = work is not None and any(
                h.kind == "gate" and h.holder == registration for h in work.holds
            )
            if not holding and self.tx.store.find_delivery(identity) is not None:
                return [], {}  # settled before: idempotent per key
            emit = gates.settle(
                work, work_id=work_id, registration=registration, admit=admit, reason=reason
            )
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        asked = Asked(
            "settle-gate",
            ("core.gate.released",) if admit else ("core.gate.refused",),
            work_id,
            {"registration": registration, "reason": reason},
        )
        return once(self.tx, request_id, asked, decide)

    def cancel(
        self,
        work_id: str,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> AppendResult:
        """Cancel a Work: fences its attempt, waits, timers and input at once (with a
        `request_id`, once: `core.work.cancelled` under `request/<id>`)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.projection.works.get(work_id)
            emit = gates.cancel(work, work_id=work_id, reason=reason, by=by)
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        asked = Asked("cancel", ("core.work.cancelled",), work_id, {"reason": reason, "by": by})
        return once(self.tx, request_id, asked, decide)
