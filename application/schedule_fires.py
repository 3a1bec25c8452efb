"""What one fire (or one tick of one schedule) appends: the fire, its Work and its input.

`Fires.tick_emits` re-parses a schedule's stored definition (`read_spec`: a SpecError means
quarantine), plans it (`rota.domain.schedule_plans.plan`) against how busy its Work is, and
returns the skipped ranges and the fires, each fire with the standing Work when new (fenced
at stream version 0: `work_fences`) and the input whose key is the fire's identity. The
Work a fire feeds is the schedule's current run (`current_run`): once a run's Work has
ended (cancelled, or failed for good), the next fire starts `<standing>:run<N>`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from rota.application.configuration import Configuration
from rota.application.transactions import Transactions
from rota.domain import control, lifecycle
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, Refusal
from rota.domain.events import AttemptInterrupted, InputAccepted, WorkSubmitted
from rota.domain.events.schedule import ScheduleDefined, ScheduleQuarantined
from rota.domain.events.work import input_identity
from rota.domain.schedule_plans import Busy, Fire, Plan, fired_event, plan, skipped_event
from rota.domain.schedule_specs import (
    SPEC_FORMAT,
    Spec,
    SpecError,
    fire_identity,
    parse_stored,
    rfc3339,
)
from rota.domain.schedule_specs import work_id as schedule_work
from rota.domain.state import WorkState
from rota.projections.schedules_projection import ScheduleRow, schedule_stream

# How far past the decision's `now` a quarantine puts the schedule's boundary: the store
# stamps the event after the decision (its clock read comes later, under the write lock),
# so a boundary of `now` itself lies before the event's own recorded time. The schedules
# projection also folds the boundary as the later of this and the recorded time, so it is
# never before it even when an append waits longer than this for the write lock.
QUARANTINE_AHEAD = timedelta(seconds=1)


class Fires:
    """Builds the events of fires and ticks over one transaction loop's state."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config

    def read_spec(self, row: ScheduleRow) -> Spec:
        """Re-parse a stored definition; SpecError names why it cannot be used."""
        d = row.definition
        if d.spec_format > SPEC_FORMAT:
            raise SpecError(
                f"written by a newer rota (spec format {d.spec_format} > {SPEC_FORMAT})",
                code=DomainCode.SCHEDULE_QUARANTINED,
            )
        spec = parse_stored(d.spec, d.timezone)
        if d.binding not in self.config.bindings:
            raise SpecError(f"unknown binding {d.binding!r}", code=DomainCode.SCHEDULE_QUARANTINED)
        return spec

    def run_work(self, d: ScheduleDefined, nominal: datetime | None = None) -> str:
        """The Work a fire of `d` at `nominal` feeds: the standing Work, or, once a run of it
        has ended for good (cancelled, or failed with its retries exhausted), a fresh run
        (`<standing>:run<N>`, the first N whose Work is new or not ended). So cancelling a
        schedule's Work ends that run only, as Temporal's terminate does; the next fire
        starts the next run."""
        return current_run(d, self.tx.projection.works, nominal)

    def busy(self, definition: ScheduleDefined) -> Busy:
        work = self.tx.projection.works.get(self.run_work(definition))
        if work is None:
            return Busy()
        current = work.current
        return Busy(pending=len(work.pending), running=current is not None and current.live)

    def tick_emits(self, row: ScheduleRow, now: datetime) -> tuple[list[Emit], Plan]:
        """What one tick appends for one schedule (SpecError: quarantine it)."""
        spec = self.read_spec(row)
        d = row.definition
        planned = plan(
            d,
            spec,
            boundary=row.boundary,
            now=now,
            busy=Busy() if d.overlap == "allow_all" else self.busy(d),  # each fire its own Work
            paused=row.paused,
            fired=frozenset(row.ahead),
        )
        stream = schedule_stream(d.name)
        groups: list[tuple[datetime, list[Emit]]] = [
            (s.first, [Emit(stream, skipped_event(d, s), _skip_identity(d.name, s))])
            for s in planned.skips
        ]
        created: set[str] = set()
        for fire in planned.fires:
            identity = fire_identity(d.name, fire.nominal)
            groups.append((fire.nominal, self.fire_emits(d, fire, identity, created=created)))
        groups.sort(key=lambda g: g[0])
        return [e for _, group in groups for e in group], planned

    def quarantine_emit(self, row: ScheduleRow, reason: str, now: datetime) -> Emit:
        d = row.definition
        event = ScheduleQuarantined(
            name=d.name,
            schedule_version=d.schedule_version,
            reason=reason[:300],
            boundary=now + QUARANTINE_AHEAD,
        )
        return Emit(schedule_stream(d.name), event)

    def fire_emits(
        self,
        d: ScheduleDefined,
        fire: Fire,
        identity: str,
        *,
        manual: bool = False,
        backfill: bool = False,
        created: set[str] | None = None,
        actor: str | None = None,
    ) -> list[Emit]:
        """The fire, the Work (when new) and its input, for one append."""
        created = set() if created is None else created
        target = self.run_work(d, fire.nominal)
        emits = [
            Emit(
                schedule_stream(d.name),
                fired_event(d, fire, target, identity, manual, backfill, actor),
                identity,
            )
        ]
        existing = self.tx.projection.works.get(target)
        new = existing is None and target not in created
        if new:
            kind = "run-once" if d.overlap == "allow_all" else "standing"
            emits.extend(
                lifecycle.submit(
                    None,
                    lifecycle.SubmitWork(
                        work_id=target,
                        scope=d.scope,
                        binding=d.binding,
                        kind=kind,
                        trigger=_trigger_for(d),
                        priority=d.priority,
                        keys=tuple(d.keys),
                    ),
                )
            )
            created.add(target)
        if fire.cancel_running and existing is not None:
            # Nothing to interrupt (or not interruptible): the fire is buffered.
            with contextlib.suppress(Refusal):
                emits.extend(
                    control.request_interrupt(existing, work_id=target, requested_by="schedule")
                )
        payload = {
            "schedule": d.name,
            "nominal": rfc3339(fire.nominal),
            "version": d.schedule_version,
            "input": d.input,
        }
        accepted = InputAccepted(work_id=target, key=identity, payload=payload)
        queued = Emit(work_stream(target), accepted, input_identity(target, identity))
        if new:  # the Work's definition carries its first input (`WorkSubmitted.input`)
            return [emits[0], *lifecycle.carry_first_input([*emits[1:], queued])]
        emits.append(queued)
        return emits


def work_fences(
    emits: Sequence[Emit], works: Mapping[str, WorkState] | None = None
) -> dict[str, int]:
    """The Work streams a fire's append is fenced on: a Work it creates must be new
    (version 0), so two deciders cannot both create it; a Work whose running attempt it
    interrupts (`cancel_other`) must be at the version that decision read (`works`)."""
    fences = {e.stream: 0 for e in emits if isinstance(e.event, WorkSubmitted)}
    for e in emits:
        if isinstance(e.event, AttemptInterrupted) and works is not None:
            work = works.get(e.event.work_id)
            if work is not None:
                fences[e.stream] = work.version
    return fences


def current_run(
    d: ScheduleDefined, works: Mapping[str, WorkState], nominal: datetime | None = None
) -> str:
    """The Work that is the schedule's current run (see `Fires.run_work`)."""
    standing = _work_for(d, nominal)
    if d.overlap == "allow_all":
        return standing  # each fire is a run of its own already
    target, run = standing, 1
    while (work := works.get(target)) is not None and work.terminal is not None:
        run += 1
        target = f"{standing}:run{run}"
    return target


def _work_for(d: ScheduleDefined, nominal: datetime | None = None) -> str:
    base = f"{schedule_work(d.name)}@{d.binding}"
    if d.overlap == "allow_all" and nominal is not None:
        return f"{base}:{rfc3339(nominal).replace('-', '').replace(':', '')}"
    if d.overlap == "cancel_other":
        # A Work of its own, triggered by its newest input: the run an interrupt cancelled
        # leaves its input pending (seed 001), and the next run consumes it together with
        # the newest fire's, which triggers it. The cancelled fire is not run again.
        return f"{base}:latest"
    return base


def _trigger_for(d: ScheduleDefined) -> str:
    return "last" if d.overlap == "cancel_other" else "first"


def _skip_identity(name: str, skip: Any) -> str:
    return f"schedule/{name}/skipped/{rfc3339(skip.first)}/{skip.reason}"
