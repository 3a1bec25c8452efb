"""The schedule runner: the schedules slot of the host's cadence (seed 002's order, seed 003).

Each host pass runs `ScheduleRunner.run()` after runtime recovery and the retry timers and
before admission. Only the holder of the leader lease (stream `schedules/leader`, a TTL of
the host's `settings.lease_seconds`, judged by the store's clock) fires; the lease is
taken, renewed (once a third of its TTL has passed) and found lost as events. It is
checked at the top of every tick and before every retry, so a retry never masks a lost lease. Two
leaders are harmless anyway: every fire has its delivery identity and every write is fenced
by its schedule's stream version.

Bad rows are quarantined, not fatal: a stored definition that no longer parses (tampered,
a newer spec format, an unknown time zone, a binding this runner does not know) gets a
`core.schedule.quarantined` event that accounts for every nominal time up to now (its
boundary is advanced past now, so it cannot spin), a warning log line names it, and the
other schedules fire. A store error retries the tick `RETRIES` times with a doubling
backoff (`backoff(n)`: 0.05 s, 0.1 s, 0.2 s) on the injected `sleep`, then raises
`ScheduleRunnerError`, whose message names the schedules and the tick phase and whose cause
is the store error. On that error exit the lease is NOT released: its TTL lapse covers it,
and another runner (or this one, next pass) takes over then. A graceful stop (the host's
`release_all` and `close`) hands it back (`release`: `core.schedule.leader_released`), so
a restarted or another runner takes it at once, not a lease period later.

Idle latency: the host's loop wakes on every commit to the log (from any process), so a
newly defined or resumed schedule is planned on the next pass, at once; otherwise the host
sleeps until the soonest due time of a schedule (`next_due()`), at most its idle default.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import msgspec

from rota.application.commands.schedules import ScheduleCommands
from rota.application.errors import PortCode, StoreError
from rota.application.schedule_fires import work_fences
from rota.application.transactions import Transactions
from rota.domain.emit import Emit
from rota.domain.events.schedule import (
    LeaderAcquired,
    LeaderLost,
    LeaderReleased,
    LeaderRenewed,
    ScheduleFired,
    ScheduleSkipped,
)
from rota.domain.schedule_specs import SpecError
from rota.projections.schedules_projection import LEADER_STREAM, ScheduleRow, schedule_stream

log = logging.getLogger("rota.schedules")
RETRIES = 3  # a failed tick is tried again this many times before the runner gives up
BACKOFF_SECONDS = 0.05  # the first retry's delay; each later one doubles it
LEASE_TTL_SECONDS = 30.0
CHUNK = 256  # schedules planned in one append


def backoff(retry: int) -> float:
    """The delay before retry `retry` (0-based): 0.05, 0.1, 0.2 seconds."""
    return float(BACKOFF_SECONDS * 2.0**retry)


class ScheduleRunnerError(StoreError):
    """The runner gave up on a tick after its retries (the cause is the store error)."""

    code = PortCode.SCHEDULE_RUNNER


class RunnerReport(msgspec.Struct):
    leader: bool = False
    fired: int = 0
    skipped: int = 0
    quarantined: list[str] = msgspec.field(default_factory=list)
    retries: int = 0


class ScheduleRunner:
    """Plans and fires every due schedule while holding the leader lease."""

    def __init__(
        self,
        commands: ScheduleCommands,
        owner: str,
        *,
        ttl_seconds: float = LEASE_TTL_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.commands = commands
        self.owner = owner
        self.ttl = timedelta(seconds=ttl_seconds)
        self.sleep = sleep
        self.term = 0  # the lease term this runner holds (0: none)
        self.phase = "lease"
        self._next: dict[str, tuple[tuple[object, ...], datetime | None]] = {}

    @property
    def tx(self) -> Transactions:
        return self.commands.tx

    def run(self) -> RunnerReport:
        """One pass of the schedules slot (see the module docs)."""
        report = RunnerReport()
        failure: StoreError | None = None
        for attempt in range(RETRIES + 1):
            if attempt:
                report.retries = attempt
                self.sleep(backoff(attempt - 1))
            try:
                self.phase = "lease"
                self.tx.catch_up()
                if not any(r.active for r in self.commands.projection.active()):
                    return report  # nothing to lead
                if not self.ensure_lease():
                    return report
                report.leader = True
                self._tick(report)
                return report
            except StoreError as exc:
                failure = exc
                log.warning("schedule tick failed (%s), try %d: %s", self.phase, attempt + 1, exc)
        raise ScheduleRunnerError(
            f"schedule runner gave up after {RETRIES} retries in {self.phase}: {failure}"
        ) from failure

    # -- the leader lease ---------------------------------------------------------------

    def ensure_lease(self) -> bool:
        """Hold the lease (take or renew it as needed); False when another holds it."""
        outcome = [0]  # the term held after this call (0: none)

        def decide() -> tuple[list[Emit], dict[str, int]]:
            now = self.tx.now()
            lease = self.commands.projection.leader
            expected = {LEADER_STREAM: lease.stream_version}
            holder = lease.holder(now)
            if self.term and holder == self.owner and lease.term == self.term:
                outcome[0] = self.term
                assert lease.expires_at is not None
                if lease.expires_at - now > self.ttl * 2 / 3:
                    return [], {}
                renewed = LeaderRenewed(owner=self.owner, term=self.term, expires_at=now + self.ttl)
                return [Emit(LEADER_STREAM, renewed)], expected
            emits: list[Emit] = []
            if self.term and not (lease.term == self.term and lease.lost):
                # Our term ended: it lapsed (paused past the TTL) or another runner took it.
                why = "lapsed" if lease.term == self.term else "taken over"
                lost = LeaderLost(owner=self.owner, term=self.term, reason=why)
                emits.append(Emit(LEADER_STREAM, lost))
            if holder is not None:
                outcome[0] = 0
                return emits, expected
            outcome[0] = lease.term + 1
            taken = LeaderAcquired(owner=self.owner, term=outcome[0], expires_at=now + self.ttl)
            emits.append(Emit(LEADER_STREAM, taken))
            return emits, expected

        before = self.term
        self.tx.transact(decide)
        self.term = outcome[0]
        if before and self.term != before:
            log.warning("schedule leader lease of %s (term %d) lost", self.owner, before)
        return self.term != 0

    def release(self, reason: str = "graceful stop") -> bool:
        """Hand the lease back (a graceful stop): `core.schedule.leader_released`, so the
        next runner takes it at once instead of waiting out the TTL. True when released; a
        lease already lapsed or taken over is left alone, and a store error only logs (the
        TTL lapse covers it, as on an error exit)."""
        term, self.term = self.term, 0
        self._next.clear()
        if not term:
            return False
        released = [False]

        def decide() -> tuple[list[Emit], dict[str, int]]:
            lease = self.commands.projection.leader
            released[0] = False
            if lease.term != term or lease.holder(self.tx.now()) != self.owner:
                return [], {}
            released[0] = True
            event = LeaderReleased(owner=self.owner, term=term, reason=reason)
            identity = f"{LEADER_STREAM}/{term}/released"
            return [Emit(LEADER_STREAM, event, identity)], {LEADER_STREAM: lease.stream_version}

        try:
            self.tx.transact(decide)
        except StoreError as exc:
            log.warning("schedule leader lease of %s not released (%s): it lapses", self.owner, exc)
            return False
        return released[0]

    # -- one tick -----------------------------------------------------------------------

    def _tick(self, report: RunnerReport) -> None:
        now = self.tx.now()
        due = [row.name for row in self.commands.projection.active() if self._due(row, now)]
        for start in range(0, len(due), CHUNK):
            names = due[start : start + CHUNK]
            self.phase = "lease"
            if start and not self.ensure_lease():
                return  # lost mid-tick: the new leader goes on
            shown = ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
            self.phase = f"fire of schedule {shown}"
            self._fire(names, report)

    def _key(self, row: ScheduleRow) -> tuple[object, ...]:
        d = row.definition
        return (row.boundary, d.schedule_version, row.paused, row.quarantined, len(row.ahead))

    def _due(self, row: ScheduleRow, now: datetime) -> bool:
        if not row.active:
            return False
        cached = self._next.get(row.name)
        if cached is None or cached[0] != self._key(row):
            return True  # not planned since it changed: plan it
        return cached[1] is not None and cached[1] <= now

    def next_due(self) -> datetime | None:
        """The soonest due time of a schedule this runner planned, or of renewing its lease
        (for the host's sleep)."""
        rows = self.commands.projection.schedules
        dues = [
            due
            for name, (key, due) in self._next.items()
            if due is not None and name in rows and self._key(rows[name]) == key
        ]
        lease = self.commands.projection.leader
        if self.term and lease.term == self.term and lease.expires_at is not None:
            dues.append(lease.expires_at - self.ttl * 2 / 3)  # when it wants renewing
        return min(dues) if dues else None

    def _fire(self, names: list[str], report: RunnerReport) -> None:
        commands = self.commands
        nexts: dict[str, datetime | None] = {}
        quarantined: list[str] = []

        def decide() -> tuple[list[Emit], dict[str, int]]:
            now = self.tx.now()
            nexts.clear()
            quarantined.clear()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for name in names:
                row = commands.projection.get(name)
                if row is None or not row.active:
                    continue
                try:
                    more, planned = commands.tick_emits(row, now)
                    nexts[name] = planned.next_due
                except SpecError as exc:
                    more = [commands.quarantine_emit(row, str(exc), now)]
                    quarantined.append(name)
                if more:
                    emits.extend(more)
                    expected[schedule_stream(name)] = row.stream_version
            expected.update(work_fences(emits, self.tx.projection.works))
            return emits, expected

        result = self.tx.transact(decide)
        for name in quarantined:
            log.warning(
                "schedule %s quarantined: it fires no more until redefined or resumed", name
            )
        report.quarantined.extend(quarantined)
        for r in result.recorded:
            if isinstance(r.event, ScheduleFired):
                report.fired += 1
            elif isinstance(r.event, ScheduleSkipped):
                report.skipped += r.event.count
        rows = commands.projection.schedules
        for name, due in nexts.items():
            if name in rows:
                self._next[name] = (self._key(rows[name]), due)
