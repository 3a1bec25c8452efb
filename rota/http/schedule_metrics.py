"""The schedule families of `/metrics`: schedules by state, the quarantined ones, the
unhealthy ones (stuck or quarantined: `rota.application.queries.schedule_health`), whether
this process holds the schedule runner's leader lease, fires by schedule and skipped
nominal times by schedule and reason.

States, fires and the lease are read from the schedules projection at scrape time. The
skips by reason are tallied from the schedule streams' `core.schedule.skipped` events,
incrementally (each scrape reads only the events after the last one it saw; the first
scrape of a process reads them all), so they too are right after a restart. The `schedule`
label is a schedule's name: bounded by what the configuration and the API defined, and
inside the series budget like every label.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rota.application.queries.schedule_health import STUCK_AFTER
from rota.domain.events.schedule import ScheduleSkipped
from rota.scheduler import Scheduler

Admit = Callable[[GaugeMetricFamily | CounterMetricFamily, list[str], float], bool]
STATES = ("active", "paused", "quarantined")
UNHEALTHY = ("stuck", "quarantined")  # the statuses `rota_schedules_unhealthy` counts
PREFIX = "schedule/"  # every schedule's stream (the leader's is `schedules/leader`)
BATCH = 5000


class SkipTally:
    """Skipped nominal times by (schedule, reason), folded from the log as it grows."""

    def __init__(self) -> None:
        self.after = 0
        self.skips: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def update(self, scheduler: Scheduler) -> Counter[tuple[str, str]]:
        with self._lock:
            store = scheduler.store
            while True:
                batch = store.read_prefix(PREFIX, after=self.after, limit=BATCH)
                for recorded in batch:
                    event = recorded.event
                    if isinstance(event, ScheduleSkipped):
                        self.skips[(event.name, event.reason)] += event.count
                if batch:
                    self.after = batch[-1].position
                if len(batch) < BATCH:
                    return Counter(self.skips)


def families(scheduler: Scheduler, tally: SkipTally, admit: Admit) -> Iterator[Metric]:
    """The schedule families, the ones with few series first."""
    read = scheduler.queries.schedules.metrics()
    rows, holder, owner = read.rows, read.leader, read.owner
    health = scheduler.queries.schedules.health()
    skips = tally.update(scheduler)

    leader = GaugeMetricFamily(
        "rota_schedule_leader_held",
        "1 while this process holds the schedule runner's leader lease (only it fires)",
    )
    admit(leader, [], 1 if holder == owner else 0)
    yield leader
    quarantined = GaugeMetricFamily(
        "rota_schedules_quarantined", "Schedules quarantined: they fire no more until released"
    )
    admit(quarantined, [], sum(1 for r in rows if r.quarantined is not None))
    yield quarantined
    flagged: Counter[str] = Counter(h.status for h in health)
    unhealthy_ = GaugeMetricFamily(
        "rota_schedules_unhealthy",
        "Schedules flagged by the health read (doctor's schedule_health): stuck (the newest "
        f"{STUCK_AFTER} nominal times did not run) or quarantined",
        labels=["status"],
    )
    for status in UNHEALTHY:
        admit(unhealthy_, [status], flagged[status])
    yield unhealthy_
    by_state = GaugeMetricFamily("rota_schedules", "Schedules by state", labels=["state"])
    states = Counter(
        "quarantined" if r.quarantined is not None else "paused" if r.paused else "active"
        for r in rows
    )
    for state in STATES:
        admit(by_state, [state], states[state])
    yield by_state

    fires = CounterMetricFamily(
        "rota_schedule_fires", "Nominal times a schedule fired (manual too)", labels=["schedule"]
    )
    for row in rows:
        admit(fires, [row.name], row.fired)
    yield fires
    skipped = CounterMetricFamily(
        "rota_schedule_skips",
        "Nominal times a schedule skipped, by reason",
        labels=["schedule", "reason"],
    )
    known = {r.name for r in rows}
    for (name, reason), n in sorted(skips.items()):
        if name in known:
            admit(skipped, [name, reason], n)
    yield skipped
