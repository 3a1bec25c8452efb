"""`rota explain WORK`: why a Work is where it is, citing the log positions that caused it.

The Work's own stream is folded into its state (`rota.domain.evolve`) and its history
(`HistoryProjection`), so every statement names the positions of the events behind it:
- completed: the outcome's position; cancelled: the cancellation's;
- failed: exhausted, permanent or lost, with the failures' positions and codes;
- held: each hold with the position of the event that held it and who may release it;
- retrying: the failure, and the timer armed after it (position, due time);
- running / waiting (parked): the claim, the current segment and the lease;
- ready: why no start admits it now (pool or scope capacity, budget, binding), from a dry
  run of admission (`rota.domain.admission.plan_starts`, as `rota capacity` does) over the
  scheduler projection at the log head; the slot holders are cited with their claims.
Nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from rota.application.ports import EventStore, ProjectionStore
from rota.application.queries.explain import ReadyLook, ready_look
from rota.application.queries.flow import PASS_LIMIT, fair_share, held_key, held_with_flow
from rota.application.service import SchedulerService
from rota.application.timestamps import format_timestamp, parse_timestamp
from rota.domain import admission, waits
from rota.domain.errors import DomainCode, RotaError
from rota.domain.evolve import evolve
from rota.domain.recovery import failed_recoveries
from rota.domain.state import WorkState
from rota.projections.history import HistoryProjection
from rota.projections.records import AttemptHistory, WorkHistory
from rota.replay.retention_audit import notes as retention_notes


class Statement(msgspec.Struct, frozen=True):
    """One reason, in words, with the log positions of the events it rests on."""

    kind: str
    text: str
    positions: list[int]


class Explanation(msgspec.Struct, frozen=True):
    work_id: str
    state: str
    position: int
    statements: list[Statement]

    def lines(self) -> list[str]:
        out = [f"{self.work_id}: {self.state} (log position {self.position})"]
        for s in self.statements:
            cite = ", ".join(str(p) for p in s.positions)
            out.append(f"  {s.text}" + (f"  [positions {cite}]" if cite else ""))
        return out


def _t(when: datetime | None) -> str:
    return "-" if when is None else format_timestamp(when)


def work_story(store: EventStore, work_id: str) -> tuple[WorkState, HistoryProjection, int]:
    """The Work's state and history, folded from its own stream."""
    events = store.read_stream(f"work/{work_id}")
    if not events:
        raise RotaError(f"no Work {work_id!r} in this store", code=DomainCode.UNKNOWN_WORK)
    work: WorkState | None = None
    history = HistoryProjection()
    for r in events:
        at = parse_timestamp(r.recorded_at)
        work = evolve(work, r.event, r.position, at) or work
        history.apply(r.position, r.stream, r.version, at, r.event)
    assert work is not None
    return work, history, events[-1].position


def explain(
    store: EventStore,
    work_id: str,
    *,
    service: SchedulerService | None = None,
    projections: ProjectionStore | None = None,
    now: datetime | None = None,
) -> Explanation:
    """Why the Work is waiting, held, retrying, failed, running or done (see the module
    docstring). `service` supplies settings, bindings and the projection; without one,
    settings are the defaults and a Work never started cannot be pinned to a pool."""
    work, history, _ = work_story(store, work_id)
    story = history.work(work_id)
    assert story is not None
    attempts = history.attempts_of(work_id)
    state = work.state
    says: list[Statement] = []
    say = says.append
    head = store.head().position
    say(Statement("submitted", f"submitted ({_facts(work)})", [story.submitted]))
    if state == "completed":
        done = attempts[-1]
        out = done.outcome
        assert out is not None
        say(
            Statement(
                "completed",
                f"completed by attempt {done.number} at {_t(out.at)}",
                [out.position, done.claimed],
            )
        )
    elif state == "cancelled":
        say(
            Statement(
                "cancelled",
                f"cancelled: {story.cancel_reason or 'no reason given'}",
                [story.cancelled or 0],
            )
        )
    elif state == "failed":
        _failed(work, story, say)
    elif state == "held":
        _held(work, story, attempts, say)
    elif state == "retry_wait":
        _retrying(work, story, say)
    elif state in ("running", "waiting"):
        wait = work.current.wait if work.current is not None else None
        _live(attempts[-1], state, now or store.now(), say, waits.describe(wait))
        _pinned(work, attempts[-1], service, say)
    elif state == "ready" and not work.startable and attempts:
        _unverified(work, attempts[-1], say)
    elif state == "ready":
        _ready(store, work, service, projections, say)
    else:
        inputs = [story.last_input] if story.last_input else []
        say(Statement("idle", "idle: no pending input", inputs))
    for attempt in attempts:
        say(_attempt_line(attempt))
    for note in retention_notes(store, work_id):
        say(Statement("pruned", note.text, [note.position]))
    return Explanation(work_id, state, head, says)


def _facts(work: WorkState) -> str:
    """Scope and kind; priority, keys (the first is the flow) and cost when given."""
    facts = [f"scope {work.scope}", work.kind]
    if work.priority:
        facts.append(f"priority {work.priority}")
    if work.keys:
        facts.append(f"flow {work.keys[0]}, keys {', '.join(work.keys)}")
    if work.cost != 1:
        facts.append(f"cost {work.cost}")
    if work.throttle is not None:
        facts.append(f"throttle {work.throttle.key} every {work.throttle.period:g} s")
    return ", ".join(facts)


def _unverified(work: WorkState, last: AttemptHistory, say: Any) -> None:
    out = last.outcome
    text = (
        f"ready, but attempt {last.number} ended ({out.kind if out else 'ended'}) and its "
        "stop is not verified yet: it keeps its slot, and no new attempt starts until then"
    )
    cited = [work.pending[0].position, *([out.position] if out else [])]
    say(Statement("waiting", text, cited))


def _failed(work: WorkState, story: WorkHistory, say: Any) -> None:
    failures = story.failures
    last = failures[-1] if failures else None
    positions = [f.position for f in failures]
    blocked = work.retry.blocked_reason
    terminal = " (terminal)" if work.terminal == "failed" else "; `rota retry` retries it"
    if blocked == "permanent_failure" and last is not None:
        text = f"failed permanently: attempt {last.attempt} failed with {last.code}"
        text += f": {last.message}" if last.message else ""
        say(Statement("failed", text + terminal, [last.position]))
    elif blocked == "lost" and last is not None:
        text = (
            f"failed: attempt {last.attempt} was lost ({last.message}) and lost attempts are "
            f"retried only for Work declared idempotent or deduplicated (safety {work.safety})"
        )
        say(Statement("failed", text + terminal, [last.position]))
    else:
        codes = ", ".join(f"{f.code}@{f.position}" for f in failures) or "none recorded"
        text = f"failed: retry budget exhausted after {work.retry.failures} failures ({codes})"
        say(Statement("failed", text + terminal, positions))


def _held(work: WorkState, story: WorkHistory, attempts: list[AttemptHistory], say: Any) -> None:
    for hold in work.holds:
        how = (
            f"only start gate {hold.holder} settles it"
            if hold.kind == "gate"
            else f"`rota release {work.work_id}` releases it"
        )
        cited = [hold.position]
        if hold.kind == "crash_loop" and attempts:
            cited += [r.position for r in attempts[-1].recoveries if r.mode == "relaunch"]
        if hold.kind == "recovery_exhausted":  # the failed recoveries in a row behind it
            failed = [f.position for f in story.failures if f.code == "recovery_failed"]
            in_a_row = failed_recoveries(work)
            cited += failed[-in_a_row:] if in_a_row else []
        say(
            Statement(
                f"held:{hold.kind}",
                f"held ({hold.kind}, by {hold.holder}): {hold.reason}; {how}",
                cited,
            )
        )
    if work.pending:
        say(
            Statement(
                "pending",
                f"{len(work.pending)} input(s) waiting meanwhile",
                [p.position for p in work.pending],
            )
        )


def _retrying(work: WorkState, story: WorkHistory, say: Any) -> None:
    last = story.failures[-1] if story.failures else None
    timer = story.retries[-1] if story.retries else None
    cited = [last.position] if last else []
    text = "retrying"
    if last is not None:
        text += f": attempt {last.attempt} failed with {last.code}"
        text += f" ({last.message})" if last.message else ""
    budget = work.current.pinned.binding.retry.max_attempts if work.current else None
    text += f"; failure {work.retry.failures} of {budget}" if budget else ""
    if timer is not None and timer.fired is None:
        text += f"; retry timer armed (generation {timer.generation}), due {_t(timer.due_at)}"
        cited.append(timer.armed)
    say(Statement("retrying", text, cited))


def _live(
    attempt: AttemptHistory, state: str, now: datetime, say: Any, waits_for: str = "any input"
) -> None:
    segment = attempt.segments[-1] if attempt.segments else None
    cited = [attempt.claimed]
    if state == "waiting":
        out = attempt.outcome
        text = f"parked: attempt {attempt.number} waits for {waits_for}"
        cited += [out.position] if out else []
        say(Statement("waiting", text, cited))
        return
    text = f"running: attempt {attempt.number} (owner {attempt.owner}, epoch {attempt.epoch})"
    if segment is not None:
        text += f", {segment.kind} segment since {_t(segment.started_at)}"
        cited.append(segment.started)
        if segment.invoked is not None:
            cited.append(segment.invoked)
    text += f"; lease expires {_t(attempt.lease_expires_at)}"
    if attempt.renewed is not None:
        cited.append(attempt.renewed)
        text += f" (renewed {attempt.renewals} times)"
    if attempt.released is not None:
        text += "; its lease was released: recovery takes it over"
        cited.append(attempt.released)
    elif now >= attempt.lease_expires_at:
        text += "; the lease has expired: recovery takes it over"
    say(Statement("running", text, sorted(set(cited))))


def _pinned(
    work: WorkState, last: AttemptHistory, service: SchedulerService | None, say: Any
) -> None:
    """Which configuration generation the live attempt is pinned to (historical executors)."""
    current = work.current
    if current is None:
        return
    pinned = current.pinned
    text = (
        f"pinned to configuration generation {pinned.generation} "
        f"(executor {pinned.registration.name!r})"
    )
    if service is not None and service.generation != pinned.generation:
        text += (
            f"; this configuration is generation {service.generation}: only the pinned "
            "generation's executor (or a stable one, such as shell) recovers, stops or "
            "controls it, else each pass reports unsupported_generation"
        )
    say(Statement("pinned", text, [last.claimed]))


def _ready(
    store: EventStore,
    work: WorkState,
    service: SchedulerService | None,
    projections: ProjectionStore | None,
    say: Any,
) -> None:
    first = work.pending[0].position
    looking = ready_look(store, service, projections)
    ready, plan = looking.ready, looking.plan
    place = next((i for i, w in enumerate(ready, 1) if w.work_id == work.work_id), None)
    queue = f" (number {place} of {len(ready)} in the ready queue)" if place else ""
    waiting = next((w for w in plan.waiting if w.work_id == work.work_id), None)
    order = next((i for i, w in enumerate(plan.started, 1) if w == work.work_id), None)
    if waiting is None and order is None:  # not reached: its flow was dropped from the pass
        waiting = held_with_flow(looking.projection, work, plan.waiting)
    shared = fair_share(looking.projection, work, looking.starts, since=first, order=order)
    if waiting is None:
        text = f"ready since input at position {first}{queue}: the next start pass admits it"
        if order is not None and order > PASS_LIMIT:
            text = f"ready since input at position {first}{queue}: not in the next start pass"
        say(Statement("ready", text, [first]))
        for words, cited in shared:
            say(Statement("flow", words, cited))
        return
    cited = [first]
    text = f"waiting ({waiting.code}): {waiting.detail}{queue}"
    if waiting.code.startswith("capacity"):
        holders = _holders(store, looking, work, waiting.code, waiting.detail)
        if holders:
            text += "; slots held by " + ", ".join(f"{e} (claimed at {p})" for e, p in holders)
            cited += [p for _, p in holders]
    say(Statement("waiting", text, cited))
    for words, cited in shared:
        say(Statement("flow", words, cited))


def _holders(
    store: EventStore, looking: ReadyLook, work: WorkState, code: str, waiting_detail: str = ""
) -> list[tuple[str, int]]:
    """The slot holders keeping `work` out, each with the position of its claim."""
    projection, configuration = looking.projection, looking.configuration
    if code == DomainCode.CAPACITY_KEY:
        executions = list(projection.key_slots.get(held_key(waiting_detail) or "", ()))
    elif code == DomainCode.CAPACITY_SCOPE:
        limited = [
            s for s in admission.ancestors(work.scope) if s in configuration.settings.scope_limits
        ]
        executions = [
            e
            for e, scope in projection.slot_scopes.items()
            if any(scope == s or scope.startswith(s + "/") for s in limited)
        ]
    else:
        try:
            pool = configuration.pinned_for(work.binding).registration.pool
        except RotaError:
            return []
        executions = list(projection.slots.get(pool, ()))
    found: list[tuple[str, int]] = []
    for execution in sorted(executions)[:16]:
        holder, _, number = execution.rpartition("/")
        _, history, _ = work_story(store, holder)
        attempt = history.attempt(holder, int(number)) if number.isdigit() else None
        if attempt is not None:
            found.append((execution, attempt.claimed))
    return found


def _attempt_line(attempt: AttemptHistory) -> Statement:
    cited = [attempt.claimed]
    text = f"attempt {attempt.number}: claimed at {_t(attempt.claimed_at)}"
    for recovery in attempt.recoveries:
        text += f", {recovery.mode} ({recovery.reason})"
        cited.append(recovery.position)
    out = attempt.outcome
    if out is not None:
        text += f", {out.kind}"
        if out.error_code and out.kind != "completed":
            text += f" ({out.error_code})"
        cited.append(out.position)
    if attempt.stop_confirmed is not None:
        cited.append(attempt.stop_confirmed)
    return Statement("attempt", text, cited)


__all__ = ["Explanation", "Statement", "explain", "work_story"]
