"""Flow-control commands of an operator: a Work's priority, pauses of a pool, a key or a
scope (`rota.domain.flow_ops` decides; the start pass applies them from its next run).

A priority change is fenced by the Work's stream version, a pause or resume by the
`flow/pauses` stream's, so a racing host's change is re-decided, never overwritten. With a
`request_id` the answering event is recorded under `request/<id>` and a repeat answers from
the log (`rota.application.commands.requests`); without one, asking for what already is
(the same priority, a pause of what is paused) appends nothing.
"""

from __future__ import annotations

from rota.application.commands.requests import Asked, once
from rota.application.configuration import Configuration
from rota.application.ports import AppendResult
from rota.application.transactions import Transactions
from rota.domain import flow_ops
from rota.domain.emit import Emit, work_stream


class FlowCommands:
    """Change priorities; pause and resume pools, keys and scopes."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config

    def reprioritize(
        self,
        work_id: str,
        priority: int,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> AppendResult:
        """Give a Work a new priority (`core.work.reprioritized`); nothing when it has it."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.projection.works.get(work_id)
            emit = flow_ops.reprioritize(
                work, work_id=work_id, priority=priority, by=by, reason=reason
            )
            if emit is None or work is None:
                return [], {}
            return [emit], {work_stream(work_id): work.version}

        asked = Asked(
            "reprioritize",
            ("core.work.reprioritized",),
            work_id,
            {"priority": priority, "reason": reason, "by": by},
        )
        return once(self.tx, request_id, asked, decide)

    def pause(
        self,
        target: str,
        name: str,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> AppendResult:
        """Pause a pool, a key or a scope (`core.flow.paused`); nothing when it is paused."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            flow = self.tx.projection.flow
            emit = flow_ops.pause(flow.paused, target=target, name=name, reason=reason, by=by)
            if emit is None:
                return [], {}
            return [emit], {flow_ops.PAUSES: flow.pause_version}

        asked = Asked(
            "pause",
            ("core.flow.paused",),
            name,
            {"target": target, "reason": reason, "by": by},
            target_field="name",
        )
        return once(self.tx, request_id, asked, decide)

    def resume(
        self,
        target: str,
        name: str,
        *,
        by: str = "operator",
        request_id: str | None = None,
    ) -> AppendResult:
        """Resume a paused pool, key or scope (`core.flow.resumed`); `not_paused` otherwise."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            flow = self.tx.projection.flow
            emit = flow_ops.resume(flow.paused, target=target, name=name, by=by)
            return [emit], {flow_ops.PAUSES: flow.pause_version}

        asked = Asked(
            "resume",
            ("core.flow.resumed",),
            name,
            {"target": target, "by": by},
            target_field="name",
        )
        return once(self.tx, request_id, asked, decide)
