"""Admission: which ready Work may start now, and what each start records. Pure.

A start pass walks ready Work in admission order (priority, then fair share between flows,
then readiness; one start in every `share` for the oldest: `rota.domain.choosing`) and, for
each, checks in order:
0. a parked Work whose named wait predicate has input to judge, and no input it already
   matched, is handed back to be judged (`Plan.judge`, `wait_unjudged`), like the gates;
1. its own pool, against that pool's limit only (`Settings.pool_limit`; 0: unbounded):
   `capacity_pool` (a `pool_limits` entry), `capacity_job_concurrency` (`jobs`) or
   `capacity_concurrency` (`agents`, and a declared pool without an entry);
2. its scope and every ancestor with a concurrency limit, counting every pool:
   `capacity_scope`;
2b. flow control (`rota.domain.flow_checks`): a paused pool, scope or key (`flow_paused`),
   a concurrency key at its limit (`capacity_key`), a rate bucket or throttle without
   the tokens the Work costs (`rate_limited`, with when the next one is due);
3. start gates, before a Work's first attempt only and only once capacity allows it:
   hold (`core.gate.held`, `gate_held`) or fail to decide (`start_gate`, nothing held);
   they are asked (`Plan.asks`) about the input that would trigger the attempt, and again
   when another input would trigger it by the time their answer is used;
4. budgets: an applicable ledger at its max holds the Work (`core.budget.held`,
   `over_budget`) unless a released budget hold left a pass; an admitted start is charged
   one `turns`, and one `attempts` when it creates an execution.
Each start then claims (or resumes) the attempt. The plan names every stream whose
version fences it (pools, limited scopes, limited keys, rate buckets, the budget ledgers),
so racing schedulers can never both admit past a limit or take the same token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Literal

import msgspec

from rota.domain import budgets as bg
from rota.domain import starts
from rota.domain.choosing import Chooser, Group
from rota.domain.emit import Emit, pool_stream, work_stream
from rota.domain.errors import DomainCode, NotEligible
from rota.domain.events import CapacityClaimed
from rota.domain.events.admission import (
    Budget,
    BudgetCharged,
    BudgetHeld,
    Charge,
    GateHeld,
    ScopeCapacityClaimed,
)
from rota.domain.flow import OLDEST, FlowRules
from rota.domain.flow_checks import FlowPass, FlowView
from rota.domain.policy import Pinned, Settings
from rota.domain.state import WorkState
from rota.domain.waits import unjudged, waking_inputs

GateVerdict = Literal["let", "hold", "error"]
LEDGERS = "budget/ledgers"
NO_FLOW = FlowView()


class GateDecision(msgspec.Struct, frozen=True):
    """What the start gates said about one Work's first start (asked outside any write).

    `trigger` is the position of the input they were shown (the one that would trigger the
    attempt); a decision about another input than the one that would trigger it now is not
    used: the gates are asked again."""

    verdict: GateVerdict
    registration: str = ""
    reason: str = ""
    trigger: int | None = None


class Waiting(msgspec.Struct, frozen=True):
    """A ready Work this pass held back, and why (a stable code and words)."""

    work_id: str
    code: str
    detail: str


class Plan(msgspec.Struct):
    emits: list[Emit]
    waiting: list[Waiting]
    fences: set[str]
    started: list[str]
    asks: list[str]
    # Parked Work whose named wait predicate has pending input to judge (asked outside
    # any write by the application, like the start gates; rota.domain.waits).
    judge: list[str] = msgspec.field(default_factory=list)
    # When the first Work held back for tokens may start (a host wakes then).
    next_token: datetime | None = None


def ancestors(scope: str) -> list[str]:
    """`root/team/project` -> ['root/team/project', 'root/team', 'root']."""
    parts = scope.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def plan_starts(
    works: Iterable[WorkState] | Mapping[Group, Iterator[WorkState]],
    *,
    now: datetime,
    owner: str,
    settings: Settings,
    pin: Callable[[WorkState], Pinned],
    pool_in_use: Mapping[str, int],
    scope_in_use: Mapping[str, int],
    budgets: tuple[Budget, ...] = (),
    used: bg.Used = lambda budget, ledger, window: 0.0,
    notified: frozenset[str] | set[str] = frozenset(),
    gated: bool = False,
    gates: Mapping[str, GateDecision] | None = None,
    limit: int = 256,
    flow: FlowView = NO_FLOW,
) -> Plan:
    """Plan one start pass over `works`: ready Work by group (`(-priority, flow)`, each
    oldest first), or a plain list in that order. See the module docstring."""
    plan = Plan([], [], set(), [], [])
    groups = works if isinstance(works, Mapping) else group_ready(works, flow.rules)
    chooser = Chooser(groups, fair=flow.fair, rules=flow.rules, limit=limit)
    flows = FlowPass(flow, now)
    idle = flows.idle  # no rule, no pause: only a Work's own throttle or debounce asks
    single = chooser.single
    # One group (no priorities, no keys: the commonest pass) is walked as it comes.
    lone = chooser.lone
    looked = 0
    taken: dict[str, list[str]] = {}
    scope_taken: dict[str, list[str]] = {}
    charged: dict[tuple[str, str, str], float] = {}
    sent = set(notified)  # a notice's identity is emitted at most once, in the log or here
    scope_limits = settings.scope_limits

    def used_now(budget: str, ledger: str, window: str) -> float:
        return used(budget, ledger, window) + charged.get((budget, ledger, window), 0.0)

    while len(plan.started) < limit:
        if lone is not None:
            work, oldest = next(lone, None), False
            looked += 1
            if work is None or looked > limit:
                break
        else:
            chosen = chooser.next()
            if chosen is None:
                break
            work, oldest = chosen
        known = flows.known_full(work) if flows.full else None
        if known is not None:
            plan.waiting.append(Waiting(work.work_id, known.code, known.detail))
            if not chooser.skipped():
                break
            looked -= lone is not None  # a lone group's skips are counted apart too
            continue
        if unjudged(work) and not waking_inputs(work):
            plan.judge.append(work.work_id)
            detail = "its named wait predicate is asked about new input"
            plan.waiting.append(Waiting(work.work_id, DomainCode.WAIT_UNJUDGED, detail))
            continue
        try:
            pinned = _pin(work, pin)
        except NotEligible as refusal:
            plan.waiting.append(Waiting(work.work_id, refusal.code, refusal.message))
            continue
        pool = pinned.registration.pool
        in_pool = pool_in_use.get(pool, 0) + len(taken.get(pool, ()))
        ceiling = settings.pool_limit(pool)
        if ceiling and in_pool >= ceiling:
            detail = f"pool {pool} is full ({in_pool}/{ceiling})"
            plan.waiting.append(Waiting(work.work_id, settings.pool_code(pool), detail))
            continue
        limited: list[str] = []  # (no scope limits, the commonest settings: none is full)
        full: str | None = None
        if scope_limits:
            limited = [s for s in ancestors(work.scope) if s in scope_limits]
            full = next(
                (
                    s
                    for s in limited
                    if scope_in_use.get(s, 0) + len(scope_taken.get(s, ())) >= scope_limits[s]
                ),
                None,
            )
        if full is not None:
            detail = f"scope {full} is at its limit of {settings.scope_limits[full]}"
            plan.waiting.append(Waiting(work.work_id, DomainCode.CAPACITY_SCOPE, detail))
            continue
        held_back = (
            None
            if idle and (work.flow is None or (work.throttle is None and work.not_before is None))
            else flows.hold(work, pool, ancestors(work.scope) if flow.paused else [])
        )
        if held_back is not None:
            plan.waiting.append(Waiting(work.work_id, held_back.code, held_back.detail))
            if held_back.whole_flow:
                chooser.drop(work, flow.rules.flow(work.keys, work.scope))
            continue
        passes: list[str] = []
        first_start = not work.attempts
        if gated and first_start and not work.gate_pass:
            decision = (gates or {}).get(work.work_id)
            if decision is not None and decision.trigger not in (None, _trigger(work)):
                decision = None  # more input came since: the gates must see the new trigger
            if decision is None:
                plan.asks.append(work.work_id)
                plan.waiting.append(
                    Waiting(work.work_id, DomainCode.START_GATE, "the start gates are asked")
                )
                continue
            if decision.verdict == "hold":
                held = GateHeld(
                    work_id=work.work_id, registration=decision.registration, reason=decision.reason
                )
                plan.emits.append(Emit(work_stream(work.work_id), held))
                plan.waiting.append(Waiting(work.work_id, DomainCode.GATE_HELD, decision.reason))
                continue
            if decision.verdict == "error":
                detail = f"start gate {decision.registration} could not decide; nothing is held"
                plan.waiting.append(Waiting(work.work_id, DomainCode.START_GATE, detail))
                continue
        elif work.gate_pass and first_start:
            passes.append("gate")
        new_execution = work.current is None or work.current.status != "parked"
        execution = (
            f"{work.work_id}/{len(work.attempts) + 1 if new_execution else len(work.attempts)}"
        )
        if budgets:
            over = bg.reached(budgets, work.work_id, work.scope, now, used_now)
            if over is not None and not work.budget_pass:
                budget, ledger, window, total = over
                reason = (
                    f"budget {budget.id} reached: {total:g} of {budget.max:g} {budget.unit} "
                    f"({ledger}, {window})"
                )
                event = BudgetHeld(
                    work_id=work.work_id,
                    budget=budget.id,
                    ledger=ledger,
                    window=window,
                    reason=reason,
                )
                plan.emits.append(Emit(work_stream(work.work_id), event))
                charge = Charge(budget.id, ledger, window, budget.unit, 0.0)
                notice = bg.notice("exceeded", budget, charge, work.scope, work.work_id, total)
                if bg.fresh(notice, sent):
                    plan.emits.append(notice)
                plan.waiting.append(Waiting(work.work_id, DomainCode.OVER_BUDGET, reason))
                continue
            if work.budget_pass:
                passes.append("budget")
            amounts = {"turns": 1.0, "attempts": 1.0 if new_execution else 0.0}
            charges = bg.charges_for(budgets, work.work_id, work.scope, now, amounts)
            if charges:
                plan.emits.extend(
                    bg.notices(budgets, charges, work.work_id, work.scope, used_now, sent)
                )
                for c in charges:
                    key = (c.budget, c.ledger, c.window)
                    charged[key] = charged.get(key, 0.0) + c.amount
                epoch = (work.current.epoch + 1) if not new_execution and work.current else 1
                event_c = BudgetCharged(
                    work_id=work.work_id, execution=execution, source=0, charges=charges
                )
                identity = f"charge/{execution}/{epoch}/admission"
                plan.emits.append(Emit(LEDGERS, event_c, identity))
            plan.fences.add(LEDGERS)
        claim = starts.claim(work, now=now, owner=owner, pinned=pinned)
        if oldest:
            passes.append(OLDEST)
        if passes:
            claim = Emit(claim.stream, msgspec.structs.replace(claim.event, passes=passes))
        plan.emits.append(claim)
        plan.started.append(work.work_id)
        if not idle or (work.flow is not None and work.throttle is not None):
            flows.admit(work, execution)
        if not single:
            chooser.started(work, oldest, flow.rules.flow(work.keys, work.scope))
        taken.setdefault(pool, []).append(execution)
        for scope in limited:
            scope_taken.setdefault(scope, []).append(execution)
    for pool, executions in taken.items():
        plan.emits.append(
            Emit(pool_stream(pool), CapacityClaimed(pool=pool, executions=executions))
        )
        plan.fences.add(pool_stream(pool))
    for scope, executions in scope_taken.items():
        fence = ScopeCapacityClaimed(scope=scope, executions=executions)
        plan.emits.append(Emit(f"scope/{scope}", fence))
        plan.fences.add(f"scope/{scope}")
    flow_emits, flow_fences = flows.emits()
    plan.emits.extend(flow_emits)
    plan.fences.update(flow_fences)
    plan.next_token = flows.next_due
    return plan


def group_ready(
    works: Iterable[WorkState], rules: FlowRules | None = None
) -> dict[Group, Iterator[WorkState]]:
    """Works in the groups a pass takes them in (`(-priority, flow)`), each group in the
    order given (a caller's list, oldest first)."""
    rules = rules if rules is not None else FlowRules()
    groups: dict[Group, list[WorkState]] = {}
    for work in works:
        groups.setdefault((-work.priority, rules.flow(work.keys, work.scope)), []).append(work)
    return {group: iter(members) for group, members in sorted(groups.items())}


def _trigger(work: WorkState) -> int:
    """The position of the input that would trigger the Work's next attempt."""
    return starts.select_inputs(work)[1].position


def _pin(work: WorkState, pin: Callable[[WorkState], Pinned]) -> Pinned:
    current = work.current
    if current is not None and current.status == "parked":
        return current.pinned
    return pin(work)
