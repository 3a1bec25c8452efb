"""Invariants of retries: timers fire once, backoff holds starts back, and a lost attempt
is retried only for Work declared safe to run again (seeds 001 and 002)."""

from __future__ import annotations

from rota.application.ports import RecordedEvent
from rota.domain.events import AttemptClaimed, AttemptResumed, RetryArmed, RetryFired
from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.model import Model


class RetryTimerFiredOnce(Invariant):
    """No retry timer fires twice, and none fires that was not armed or was disarmed.

    Seed 001 (001_a97b7b12fa97a199.txt): "The timer driver must first accept through
    AcceptDerivedInTx and atomically remove/fire the timer. A due clock alone never clears
    eligibility." and "Old due generations, terminal Work and replay remain historical". A fire
    names the generation of the Work's armed timer; firing removes it, as do a manual retry and a
    cancel.
    """

    name = "retry_timer_fired_once"
    events = (RetryFired,)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        assert isinstance(event, RetryFired)
        work = model.works.get(event.work_id)
        timer = f"retry timer {event.generation} of {event.work_id}"
        if work is None:
            return [self.violation(f"{timer} fired for a Work never submitted", at)]
        if event.generation in work.fired:
            return [self.violation(f"{timer} fired twice", work.fired[event.generation], at)]
        if event.generation != work.timer_generation:
            return [
                self.violation(
                    f"{timer} fired, but the armed timer is generation {work.timer_generation}",
                    work.timer_armed_at,
                    at,
                )
            ]
        if not work.timer_pending:
            return [
                self.violation(f"{timer} fired after it was disarmed", work.timer_cleared_at, at)
            ]
        return []


class BackoffRespected(Invariant):
    """No attempt starts while the Work's retry timer is armed and not yet fired.

    Seed 001 (001_a97b7b12fa97a199.txt): "Failures arm a durable retry Timer template with the
    failed attempt generation and trigger ancestry." and "Ordinary queued input during backoff does
    not clear it." (an armed timer blocks scheduling until it fires, a manual retry disarms it, or
    the Work is cancelled).
    """

    name = "backoff_respected"
    events = (AttemptClaimed, AttemptResumed)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event = recorded.event
        assert isinstance(event, AttemptClaimed | AttemptResumed)
        work = model.works.get(event.work_id)
        if work is None or not work.timer_pending:
            return []
        return [
            self.violation(
                f"{event.work_id}/{event.attempt} started while retry timer "
                f"{work.timer_generation} was still armed",
                work.timer_armed_at,
                recorded.position,
            )
        ]


class LostRetriedOnlyIfIdempotent(Invariant):
    """A lost attempt is retried only when its Work was admitted idempotent or deduplicated,
    with `retry_on_lost`.

    Seed 002 (002_8dcc2ec474063dfe.txt), decision 3: "只有 idempotent|deduplicated 才能从 lost
    进入 retry_wait" (only idempotent or deduplicated Work may go from lost to retry wait),
    and "默认重试所有 lost Run ... 拒绝" (retrying every lost run by default: rejected; Work
    not declared safe fails instead). So a retry timer armed for a lost
    attempt needs that safety and policy, and a run-once Work whose lost attempt may not be
    retried gets no new attempt before a manual retry.
    """

    name = "lost_retried_only_if_idempotent"
    events = (RetryArmed, AttemptClaimed)

    def observe(self, recorded: RecordedEvent, model: Model) -> list[Violation]:
        event, at = recorded.event, recorded.position
        assert isinstance(event, RetryArmed | AttemptClaimed)
        work = model.works.get(event.work_id)
        if work is None or not work.lost_at:
            return []
        current = work.current
        if isinstance(event, AttemptClaimed):
            if not work.lost_blocked:
                return []
            return [
                self.violation(
                    f"{event.work_id}/{event.attempt} claimed after attempt "
                    f"{work.lost_attempt} was lost, though the Work (safety {work.safety}) "
                    "may not retry a lost attempt and no manual retry came",
                    work.lost_at,
                    at,
                )
            ]
        lost = current is not None and current.number == event.attempt == work.lost_attempt
        if not lost or current is None:
            return []
        if work.safety in ("idempotent", "deduplicated") and current.retry.retry_on_lost:
            return []
        return [
            self.violation(
                f"retry armed for lost attempt {current.execution} of a Work with safety "
                f"{work.safety} and retry_on_lost {current.retry.retry_on_lost}",
                work.lost_at,
                at,
            )
        ]
