"""The checks of a run: the named invariants after every event, and the world's own.

After every step the world calls `after_step()`: the events the step appended are read
from the log (through a handle no fault touches) and handed one by one, with their raw
rows, to the invariant `Checker` (`rota.testing.sim.invariants`), and folded into a
reference projection. Then the checks only the world can make:

- `no_internal_error`: a pass or a launcher task of the engine raised something that is
  not a `RotaError` (an `AttributeError` inside a pass is a bug, whatever the daemon loop
  does with it in production);
- `projection_matches_log`: every live host's projection, once caught up, equals a fold
  of the log (checked every `DIGEST_EVERY` steps and at rest), whose budget ledgers equal
  the invariants' own sum of the charges (`budget_ledger_balanced`);
- `acknowledged_not_lost` (at rest): every Work whose submit a client saw answered is in
  the log;
- `rebuild_matches_live` (at rest): a rebuild from position 0 equals the live fold;
- `stop_confirmed_truly_stopped`: a stop confirmed as verified leaves no process of the
  attempt running on the simulated machine (what the log alone cannot show);
- `no_livelock`: at most `LIVELOCK` events are appended while true time stands still (a
  pass that appends the same refusal forever at one moment is a livelock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rota.application.ports import RecordedEvent
from rota.application.timestamps import recorded_times
from rota.domain.events import StopConfirmed
from rota.projections.scheduler import SchedulerProjection
from rota.replay.rebuild import folded
from rota.testing.sim.invariants import INVARIANTS, Checker, Violation
from rota.testing.sim.invariants.passes import PassRecord

if TYPE_CHECKING:
    from rota.application.host import TickReport
    from rota.testing.sim.hosts import SimHost
    from rota.testing.sim.world import World

DIGEST_EVERY = 64
PAGE = 1000
WORLD_CHECKS = {
    "no_internal_error": "A pass or a launcher task never raises anything but a RotaError.",
    "projection_matches_log": "Every live host's caught-up projection equals a fold of the log.",
    "acknowledged_not_lost": "Every Work whose submit was answered is in the log.",
    "rebuild_matches_live": "A rebuild from position 0 equals the live fold of the log.",
    "stop_confirmed_truly_stopped": "A stop verified by its executor leaves nothing running.",
    "no_livelock": "Time moves on: no more than a bounded number of events at one moment.",
}
# How many events may be appended without true time moving before it is a livelock (a run
# appends a few hundred at one moment at most: a catch-up, a bulk of submits).
LIVELOCK = 3000


def names() -> dict[str, str]:
    """Every check a run makes, by name, with its one-line statement."""
    return {**INVARIANTS, **WORLD_CHECKS}


class Checks:
    """The checks of one world (module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.checker = Checker(world.settings)
        self.reference = SchedulerProjection()
        self.position = 0
        self.steps = 0
        self.moment = (-1.0, 0)  # (true time, the position when it began)
        self.passes_found: list[Violation] = []  # of the start passes of this step

    def after_step(self) -> Violation | None:
        """Check what the last step appended, then the world's checks; the first violation."""
        self.steps += 1
        found = self._new_events()
        if found is not None:
            return found
        if self.passes_found:
            return self.passes_found[0]
        for host in self.world.hosts.values():
            error = host.take_internal_error()
            if error is not None:
                return Violation("no_internal_error", f"{host.owner}: {error}", (self.position,))
        t = self.world.clock.t
        if t != self.moment[0]:
            self.moment = (t, self.position)
        elif self.position - self.moment[1] > LIVELOCK:
            return Violation(
                "no_livelock",
                f"{self.position - self.moment[1]} events appended at one moment "
                f"({self.world.clock.now().isoformat()}) and time does not move on",
                (self.moment[1] + 1, self.position),
            )
        if self.steps % DIGEST_EVERY == 0:
            return self._projections()
        return None

    def _new_events(self) -> Violation | None:
        log = self.world.log
        while True:
            batch = log.read(self.position, PAGE)
            if not batch:
                return None
            raws = log.read_raw(self.position, len(batch))
            times = recorded_times(batch, {})
            seen = self.world.outcome.types
            for recorded, raw, at in zip(batch, raws, times, strict=True):
                seen[recorded.type] = seen.get(recorded.type, 0) + 1
                violations = self.checker.observe(recorded, raw) + self._stopped(recorded)
                self.reference.apply(
                    recorded.position, recorded.stream, recorded.version, at, recorded.event
                )
                self.position = recorded.position
                if violations:
                    return violations[0]

    def _stopped(self, recorded: RecordedEvent) -> list[Violation]:
        """`stop_confirmed_truly_stopped`: the machine runs nothing of an attempt whose stop
        its executor verified (the log alone cannot tell a verified stop from a false one;
        the simulated machine knows what runs)."""
        event = recorded.event
        if not isinstance(event, StopConfirmed) or event.evidence != "verified":
            return []
        execution = f"{event.work_id}/{event.attempt}"
        left = [p for p in self.world.machine.running(execution) if p.state == "running"]
        if not left:
            return []
        return [
            Violation(
                "stop_confirmed_truly_stopped",
                f"the stop of {execution} (epoch {event.epoch}) was confirmed as verified "
                f"while its process {left[0].pid} still runs",
                (recorded.position,),
            )
        ]

    def _projections(self) -> Violation | None:
        # The engine's fold of the budgets against the invariants' own sum of the charges.
        self.reference.settle()
        unbalanced = self.checker.compare_ledgers(dict(self.reference.ledgers), self.position)
        if unbalanced:
            return unbalanced[0]
        buckets = self.checker.compare_buckets(dict(self.reference.flow.buckets), self.position)
        if buckets:
            return buckets[0]
        expected: str | None = None
        for host in self.world.live_hosts():
            if host.queries.state.applied() != self.position:
                continue  # not caught up: its next pass is
            if expected is None:
                self.reference.settle()
                expected = self.reference.digest()
            if host.queries.state.digest() != (self.position, expected):
                return Violation(
                    "projection_matches_log",
                    f"{host.owner}'s projection at position {self.position} differs from a "
                    "fold of the log",
                    (self.position,),
                )
        return None

    def note_pass(self, record: PassRecord) -> None:
        """A start pass the engine decided: its violations are reported after the step."""
        record.position = self.position
        self.world.count("start passes checked")
        if len(record.groups) > 1:  # where fair share and the starvation bound choose
            self.world.count("start passes with several groups")
            self.world.outcome.counts["starts judged by fair share"] = (
                self.world.outcome.counts.get("starts judged by fair share", 0)
                + len(record.plan.started)
            )
        if not self.passes_found:
            self.passes_found.extend(self.checker.observe_pass(record))

    def note_report(self, host: SimHost, report: TickReport) -> None:
        """What a pass reported (its step errors are store faults or refusals)."""

    def at_rest(self) -> Violation | None:
        """The checks of a finished run (module docstring)."""
        found = self._new_events() or self._projections()
        if found is not None:
            return found
        missing = sorted(w for w in self.world.acknowledged if w not in self.reference.works)
        if missing:
            return Violation(
                "acknowledged_not_lost",
                f"{len(missing)} answered submits are not in the log: {', '.join(missing[:5])}",
                (self.position,),
            )
        rebuilt, _ = folded(self.world.log)
        self.reference.settle()
        if rebuilt.digest() != self.reference.digest():
            return Violation(
                "rebuild_matches_live",
                "a rebuild from position 0 differs from the live fold",
                (self.position,),
            )
        violations = self.checker.at_rest(self.world.clock.now())
        return violations[0] if violations else None
