"""Lifecycle commands: Work and input, starts, fenced writes of an attempt, outcomes, timers.

Each command reads the projection, calls a pure decision of `rota.domain.lifecycle` and
appends through the transaction loop (`rota.application.transactions`); writes on behalf
of an attempt are fenced by its execution and lease epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from rota.application.commands.lifecycle_values import (
    Claimed,
    FiredTimers,
    StartPass,
)
from rota.application.commands.requests import Asked, once
from rota.application.commands.submissions import SubmissionCommands, result_start
from rota.application.configuration import Configuration
from rota.application.launch_writes import FencedDecision, GroupedFenced
from rota.application.ports import AppendResult
from rota.application.transactions import Transactions
from rota.domain import admission, lifecycle, pages
from rota.domain.admission import GateDecision, Waiting
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, Refusal
from rota.domain.events import AttemptClaimed, AttemptResumed
from rota.domain.policy import Pinned
from rota.domain.results import Result
from rota.domain.state import WorkState


class LifecycleCommands(SubmissionCommands):
    """The lifecycle's commands over one transaction loop and configuration: Work and
    input (`SubmissionCommands`), starts, an attempt's fenced writes, outcomes, timers."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        super().__init__(tx, config)
        self.grouped = GroupedFenced(tx)  # launch phases and recovery metadata

    # -- start ----------------------------------------------------------------------------

    def start_pass(
        self,
        limit: int = 256,
        *,
        gated: bool = False,
        gates: dict[str, GateDecision] | None = None,
        invoke: Callable[[Pinned], bool | None] | None = None,
    ) -> StartPass:
        """Admit ready Work (capacity, scope limits, gates, budgets) and claim it in one
        append; see `rota.domain.admission`. `gated`: start gates are registered, and
        `gates` holds their answers for the Work they were asked about.

        `invoke`: for a new attempt pinned so, whether its executor is called as soon as
        the claim is durable, with nothing in between (a host without a run-environment
        hook, whose executor serves the pinning: see `Launches.invoked_with_claim`), and
        then whether it isolates; None when it is not. Such an attempt's claim carries its
        invoke marker (`lifecycle.invoke_with_claim`: `invoked`), so no
        `core.execution.invoked` follows it: one event less per start, one append less
        per pass, the same facts at the claim's position."""
        waiting: list[Waiting] = []
        asks: list[str] = []
        judge: list[str] = []
        next_token: list[datetime | None] = [None]

        def decide() -> tuple[list[Emit], dict[str, int]]:
            projection = self.tx.projection
            limits = self.config.settings.scope_limits
            plan = admission.plan_starts(
                projection.ready_groups(),
                now=self.tx.now(),
                owner=self.config.owner,
                settings=self.config.settings,
                pin=lambda work: self.config.pinned_for(work.binding, work.grants),
                pool_in_use={pool: len(h) for pool, h in projection.slots.items()},
                scope_in_use=projection.scope_in_use(limits) if limits else {},
                budgets=projection.budgets,
                used=projection.used,
                notified=projection.notified,
                gated=gated,
                gates=gates,
                limit=limit,
                flow=projection.flow_view(),
            )
            next_token[:] = [plan.next_token]
            waiting[:] = plan.waiting
            asks[:] = plan.asks
            judge[:] = plan.judge
            expected: dict[str, int] = {}
            for emit in plan.emits:
                if emit.stream.startswith("work/"):
                    expected[emit.stream] = projection.works[emit.stream[5:]].version
            for fence in plan.fences:
                expected[fence] = self._fence_version(fence)
            if invoke is None:
                return plan.emits, expected
            emits = list(plan.emits)
            for i, emit in enumerate(emits):
                if isinstance(emit.event, AttemptClaimed):
                    isolated = invoke(emit.event.pinned)
                    if isolated is not None:
                        claim = lifecycle.invoke_with_claim(emit.event, isolated)
                        emits[i] = Emit(emit.stream, claim, emit.delivery_id)
            return emits, expected

        result = self.tx.transact(decide)
        claimed: list[Claimed] = []
        works = self.tx.projection.works
        for recorded in result.recorded:
            kind = type(recorded.event)  # (exact types: neither has subclasses)
            if kind is AttemptClaimed or kind is AttemptResumed:
                work = works[recorded.stream[5:]]
                assert work.current is not None
                claimed.append(Claimed(work, work.current, kind is AttemptResumed))
        return StartPass(claimed, waiting, asks, judge, next_token[0])

    def _fence_version(self, stream: str) -> int:
        projection = self.tx.projection
        if stream.startswith("pool/"):
            return projection.pool_versions.get(stream[5:], 0)
        if stream.startswith("scope/"):
            return projection.scope_versions.get(stream[6:], 0)
        if stream == admission.LEDGERS:
            return projection.ledger_version
        if stream.startswith("rate/"):
            return projection.flow.rate_versions.get(stream[5:], 0)
        if stream == "flow/keys":
            return projection.flow.keys_version
        raise ValueError(f"no fence for stream {stream!r}")

    def _pin_for_start(self, work: WorkState) -> Pinned:
        current = work.current
        if current is not None and current.status == "parked":
            return current.pinned
        return self.config.pinned_for(work.binding, work.grants)

    def invoke(self, execution_id: str, epoch: int, isolated: bool = False) -> None:
        self.tx.fenced(
            execution_id, lambda w, n, now: [lifecycle.invoke(w, n, epoch, now, isolated)]
        )

    def invoke_many(
        self, items: Sequence[tuple[str, int]], isolated: Sequence[bool] = ()
    ) -> dict[str, Refusal]:
        """Invoke markers for several attempts in one append (`isolated` per item)."""
        flags = list(isolated) or [False] * len(items)
        return self.tx.fenced_many(
            items,
            lambda w, n, epoch, now, index: [lifecycle.invoke(w, n, epoch, now, flags[index])],
        )

    def phase(
        self, execution_id: str, epoch: int, name: str, outcome: str | None, wait: bool = True
    ) -> None:
        """Record a launch phase's start (`outcome` None) or end; `wait=False` queues it to
        share the launch's next write (application/launch_writes.py)."""

        def decide(work: WorkState, number: int, now: datetime) -> list[Emit]:
            if outcome is None:
                return [lifecycle.begin_phase(work, number, epoch, now, name)]
            return [lifecycle.end_phase(work, number, epoch, now, name, outcome)]  # type: ignore[arg-type]

        self.grouped.write(execution_id, decide, wait)  # concurrent launches share appends

    def persist_recovery(self, execution_id: str, epoch: int, metadata: Any) -> None:
        self.grouped.write(
            execution_id,
            lambda w, n, now: [lifecycle.persist_recovery(w, n, epoch, now, metadata)],
        )

    def persist_recovery_many(
        self, items: Sequence[tuple[str, int, Any]]
    ) -> list[BaseException | None]:
        """Recovery metadata of several attempts, `(execution id, epoch, metadata)`, in one
        append and one durability wait; per item its refusal (a lost lease) or None."""

        def pin(epoch: int, metadata: Any) -> FencedDecision:
            return lambda w, n, now: [lifecycle.persist_recovery(w, n, epoch, now, metadata)]

        return self.grouped.write_many([(e, pin(epoch, m)) for e, epoch, m in items])

    def renew(self, execution_id: str, epoch: int) -> datetime:
        self.tx.fenced(execution_id, lambda w, n, now: [lifecycle.renew(w, n, epoch, now)])
        work, number = self.tx.execution(execution_id)
        return work.attempts[number - 1].lease_expires_at

    def renew_many(self, items: Sequence[tuple[str, int]]) -> dict[str, Refusal]:
        return self.tx.fenced_many(
            items, lambda w, n, epoch, now, _: [lifecycle.renew(w, n, epoch, now)]
        )

    def release(self, execution_id: str, epoch: int, reason: str = "released") -> None:
        self.tx.fenced(
            execution_id, lambda w, n, now: [lifecycle.release(w, n, epoch, now, reason)]
        )

    def finish(self, execution_id: str, epoch: int, result: Result) -> AppendResult:
        return self.tx.fenced(
            execution_id, lambda w, n, now: lifecycle.finish(w, n, epoch, now, result)
        )

    def finish_many(self, items: Sequence[tuple[str, int, Result]]) -> dict[str, Refusal]:
        """Store several results in one append; returns the refusals by execution id."""
        pairs = [(execution_id, epoch) for execution_id, epoch, _ in items]
        return self.tx.fenced_many(
            pairs,
            lambda w, n, epoch, now, index: lifecycle.finish(w, n, epoch, now, items[index][2]),
        )

    def time_out(self, execution_id: str, epoch: int) -> AppendResult:
        return self.tx.fenced(execution_id, lambda w, n, now: lifecycle.time_out(w, n, epoch, now))

    def confirm_stopped(
        self, execution_id: str, expected_epoch: int, evidence: str = "verified"
    ) -> AppendResult:
        def decide() -> tuple[list[Emit], dict[str, int]]:
            work, number = self.tx.execution(execution_id)
            emits = lifecycle.confirm_stopped(work, number, expected_epoch, evidence)
            return emits, {work_stream(work.work_id): work.version}

        return self.tx.transact(decide)

    def request_retry(
        self,
        work_id: str,
        *,
        alias: str = "core.manual.retry",
        requested_by: str = "operator",
        reason: str = "",
        request_id: str | None = None,
    ) -> AppendResult:
        """A manual retry of the Work's current failure; idempotent per failure (with a
        `request_id`, per request: recorded under `request/<id>`)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.projection.works.get(work_id)
            try:
                emit = lifecycle.request_retry(
                    work, work_id=work_id, alias=alias, requested_by=requested_by, reason=reason
                )
            except Refusal as refusal:
                # A caller repeating a request that was already applied gets its answer.
                if refusal.code == DomainCode.NOTHING_TO_RETRY and work is not None:
                    boundary = work.retry.failed_at
                    if self.tx.store.find_delivery(f"retry-request/{work_id}/{boundary}"):
                        return [], {}
                raise
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        asked = Asked(
            "retry",
            ("core.manual.retry", "core.retry.requested"),
            work_id,
            {"requested_by": requested_by, "reason": reason},
        )
        return once(self.tx, request_id, asked, decide)

    def fire_due_timers(self, limit: int = pages.DEFAULT_PAGE) -> FiredTimers:
        """Fire one page of the retry timers due by the store's clock, in one append.

        This is the cadence's lost-retry step (seed 002): a lost attempt of Work admitted
        as idempotent or deduplicated armed its timer with the lost transition, as every
        other failure does, and its fresh attempt starts once the timer fired. At most
        `limit` timers (1..64), earliest due first; `has_more` says more were due. A Work
        that cannot fire refuses the whole page: nothing is skipped past silently.
        """
        more = [False]

        def decide() -> tuple[list[Emit], dict[str, int]]:
            now = self.tx.now()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            due, more[0] = pages.due_timers(self.tx.projection.timers, now, limit)
            for work_id in due:
                work = self.tx.projection.works[work_id]
                emits.append(lifecycle.fire_retry(work, now))
                expected[work_stream(work_id)] = work.version
            return emits, expected

        return FiredTimers(self.tx.transact(decide).written, more[0])


# The values the commands take and return (rota.application.commands.lifecycle_values), importable
# from here beside them.
__all__ = [
    "Claimed",
    "FiredTimers",
    "LifecycleCommands",
    "StartPass",
    "result_start",
]
