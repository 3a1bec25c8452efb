"""The `/metrics` collector: every value computed from the projections (and this process's
loop) at scrape time, so they are right after a restart, within a fixed series budget.

Labels come only from bounded configuration: a binding the config defines (others are
`other`), a pool, a scope cut to `[http] scope_depth` levels, a Work state, an outcome, a
hold kind, a schedule's name, a skip reason, and at most `key_labels` concurrency keys and
rate buckets (the rest summed under `other`). Never a Work id. The schedule families are
`rota.http.schedule_metrics`, the flow-control ones `rota.http.flow_metrics`, the retention
ones `rota.http.retention_metrics`. At most
`[http] metrics_series_budget` series (default 1024) are exported a scrape; the series
past it are not exported and counted in `rota_metrics_series_dropped_total` (and the
scrape's `rota_metrics_series`). The families
are collected in a fixed order, the ones with few series first, so a budget that is too
small drops the per-binding and per-scope detail, never the totals.
"""

from __future__ import annotations

import contextlib
import platform
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from rota.application.errors import StoreError
from rota.application.timestamps import parse_timestamp
from rota.domain.state import WorkStateName
from rota.http.flow_metrics import LABELS as KEY_LABELS
from rota.http.flow_metrics import families as flow_families
from rota.http.retention_metrics import PruneTally
from rota.http.retention_metrics import families as retention_families
from rota.http.schedule_metrics import SkipTally
from rota.http.schedule_metrics import families as schedule_families
from rota.replay import checkpoint as checkpoints
from rota.scheduler import Scheduler

# The series the budget always keeps room for: build info, series and dropped.
RESERVED = 3
OUTCOMES = frozenset(
    {"completed", "failed", "handoff", "waiting", "timed_out", "lost", "interrupted", "cancelled"}
)


class Budget:
    """Counts the series of one scrape against the budget; remembers what it dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, RESERVED)
        self.dropped_total = 0
        self._lock = threading.Lock()
        self.used = 0

    def begin(self) -> None:
        self.used = 0

    def admit(
        self, family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float
    ) -> bool:
        if self.used >= self.limit - RESERVED:
            with self._lock:
                self.dropped_total += 1
            return False
        family.add_metric(labels, value)
        self.used += 1
        return True


def scope_label(scope: str, depth: int) -> str:
    return "/".join(scope.split("/")[:depth])


class RotaCollector(Collector):
    """A prometheus-client collector over one scheduler (see the module docstring)."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        budget: int = 1024,
        scope_depth: int = 2,
        key_labels: int = KEY_LABELS,
    ) -> None:
        self.scheduler = scheduler
        self.budget = Budget(budget)
        self.scope_depth = scope_depth
        self.key_labels = key_labels
        self.skips = SkipTally()  # skipped nominal times by schedule and reason
        self.prunes = PruneTally()  # retention: bytes pruned, the last prune's time
        self._scrape = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # computed at scrape time: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        with self._scrape:
            self.budget.begin()
            families = list(self._store_families())  # first: they need no store read
            # A store that does not answer: its state says so, the rest waits for it.
            with contextlib.suppress(StoreError):
                families.extend(self._families())
            yield from families
            yield from self._meta()

    def _store_families(self) -> Iterator[Metric]:
        """Whether the store takes writes (rota.store_health), without reading it."""
        admit = self.budget.admit
        health = self.scheduler.daemon.health
        state = health.state if not health.writable else self.scheduler.store.state()
        writable = GaugeMetricFamily(
            "rota_store_writable",
            "1 while the store takes writes; 0 while it is unreachable, read-only or "
            "missing events after a failover (the code is in /readyz and the log)",
        )
        admit(writable, [], 1.0 if state.writable else 0.0)
        yield writable
        spent = CounterMetricFamily(
            "rota_store_unwritable_seconds", "Time this daemon's store took no writes"
        )
        admit(spent, [], health.unwritable_seconds())
        yield spent
        changes = CounterMetricFamily(
            "rota_store_state_changes", "Times this daemon's store stopped or resumed taking writes"
        )
        admit(changes, [], health.changes)
        yield changes

    # -- the families, few series first -------------------------------------------------

    def _families(self) -> Iterator[Metric]:
        scheduler = self.scheduler
        admit = self.budget.admit
        daemon = scheduler.daemon
        passes = daemon.passes
        head = scheduler.store.head().position
        read = scheduler.queries.state.metrics()  # one look at the log head, under the lock
        applied, now, counts = read.applied, read.now, read.counts
        work_states = Counter(counts.states)
        hold_kinds = Counter(counts.holds)
        attempt_outcomes = Counter(counts.attempts)
        recovery_kinds = Counter(counts.recoveries)
        timers, bindings, capacity = read.timers, read.bindings, read.capacity

        lag = GaugeMetricFamily(
            "rota_projection_lag_events", "Events the scheduler projection has not applied"
        )
        admit(lag, [], max(0, head - applied))
        yield lag
        position = GaugeMetricFamily("rota_log_position", "The log head's position")
        admit(position, [], head)
        yield position

        cadence = GaugeMetricFamily(
            "rota_cadence_last_pass_seconds", "How long the last cadence pass of this process took"
        )
        admit(cadence, [], passes.last_seconds)
        yield cadence
        pass_time = CounterMetricFamily(
            "rota_cadence_pass_seconds", "Time spent in this process's cadence passes"
        )
        admit(pass_time, [], passes.seconds_total)
        yield pass_time
        count = CounterMetricFamily(
            "rota_cadence_passes", "Cadence passes this process ran", labels=["result"]
        )
        admit(count, ["ok"], passes.passes - passes.failed)
        admit(count, ["failed"], passes.failed)
        yield count
        if passes.last_at is not None:
            since = GaugeMetricFamily(
                "rota_cadence_last_pass_age_seconds", "Seconds since the last pass ended"
            )
            admit(since, [], time.monotonic() - passes.last_at)
            yield since

        appends = CounterMetricFamily(
            "rota_append_seconds", "Time this process's appends to the log took"
        )
        admit(appends, [], read.append_seconds)
        yield appends
        append_count = CounterMetricFamily("rota_appends", "Appends this process made")
        admit(append_count, [], read.appends)
        yield append_count

        outcomes = CounterMetricFamily(
            "rota_pass_outcomes",
            "What this process's cadence passes did (recovered, relaunched, lost ...)",
            labels=["what"],
        )
        for name in sorted(passes.totals):
            admit(outcomes, [name], passes.totals[name])
        yield outcomes

        due = GaugeMetricFamily("rota_retry_timers_due", "Retry timers due now")
        admit(due, [], sum(1 for when in timers.values() if when <= now))
        yield due
        armed = GaugeMetricFamily("rota_retry_timers", "Retry timers armed")
        admit(armed, [], len(timers))
        yield armed

        age = self._checkpoint_age(now)
        if age is not None:
            checkpoint = GaugeMetricFamily(
                "rota_checkpoint_age_seconds", "Seconds since the newest audit checkpoint"
            )
            admit(checkpoint, [], age)
            yield checkpoint

        holds = GaugeMetricFamily("rota_holds", "Holds on Work, by kind", labels=["kind"])
        held = hold_kinds
        for kind in ("budget", "gate", "crash_loop", "recovery_exhausted", "operator"):
            held.setdefault(kind, 0)
        for kind in sorted(held):
            admit(holds, [kind], held[kind])
        yield holds

        in_use = GaugeMetricFamily("rota_pool_in_use", "Attempts holding a slot", labels=["pool"])
        limit = GaugeMetricFamily(
            "rota_pool_limit", "A pool's limit (0: unbounded)", labels=["pool"]
        )
        waiting = GaugeMetricFamily(
            "rota_pool_waiting", "Ready Work the pool's limit holds back", labels=["pool"]
        )
        for pool, use in sorted(capacity.pools.items()):
            admit(in_use, [pool], use.in_use)
            admit(limit, [pool], use.limit)
            admit(waiting, [pool], use.waiting)
        yield from (in_use, limit, waiting)
        yield from flow_families(capacity, admit, self.key_labels)

        recoveries = CounterMetricFamily(
            "rota_recoveries",
            "Segments begun by recovery, from the log (kind: recovered, relaunched)",
            labels=["kind"],
        )
        kinds = recovery_kinds
        lost = sum(n for (_, outcome), n in attempt_outcomes.items() if outcome == "lost")
        for kind in ("recovered", "relaunched"):
            admit(recoveries, [kind], kinds[kind])
        yield recoveries
        lost_family = CounterMetricFamily("rota_attempts_lost", "Attempts recorded lost")
        admit(lost_family, [], lost)
        yield lost_family

        yield from schedule_families(scheduler, self.skips, admit)
        yield from retention_families(scheduler, self.prunes, admit)

        states = GaugeMetricFamily(
            "rota_works", "Works by state and scope", labels=["state", "scope"]
        )
        by_state: Counter[tuple[str, str]] = Counter()
        for (state, scope), n in work_states.items():
            by_state[state, scope_label(scope, self.scope_depth)] += n
        for state in WORK_STATES:
            by_state.setdefault((state, "root"), 0)
        for (state, scope), n in sorted(by_state.items()):
            admit(states, [state, scope], n)
        yield states

        attempts = CounterMetricFamily(
            "rota_attempts", "Attempts by binding and outcome", labels=["binding", "outcome"]
        )
        by_outcome: Counter[tuple[str, str]] = Counter()
        for (binding, outcome), n in attempt_outcomes.items():
            label = (outcome if outcome in OUTCOMES else "other") if outcome else "none"
            by_outcome[binding if binding in bindings else "other", label] += n
        for (binding, outcome), n in sorted(by_outcome.items()):
            admit(attempts, [binding, outcome], n)
        yield attempts

    def _checkpoint_age(self, now: datetime) -> float | None:
        scheduler = self.scheduler
        directory = scheduler.config.audit.checkpoint_dir
        if not directory:
            return None
        newest = checkpoints.latest(directory, scheduler.store.store_id)
        if newest is None:
            return None
        return max(0.0, (now - parse_timestamp(newest.written_at)).total_seconds())

    def _meta(self) -> Iterator[Metric]:
        from rota import __version__

        info = GaugeMetricFamily("rota_build_info", "rota's version", labels=["version", "python"])
        info.add_metric([__version__, platform.python_version()], 1)
        series = GaugeMetricFamily(
            "rota_metrics_series", "Series this scrape exported (the budget's count)"
        )
        series.add_metric([], self.budget.used + RESERVED)
        dropped = CounterMetricFamily(
            "rota_metrics_series_dropped",
            "Series not exported because the scrape reached [http] metrics_series_budget",
        )
        dropped.add_metric([], self.budget.dropped_total)
        yield from (info, series, dropped)


WORK_STATES: tuple[str, ...] = WorkStateName.__args__  # type: ignore[attr-defined]


def registry(scheduler: Scheduler, *, budget: int, scope_depth: int) -> CollectorRegistry:
    """A registry holding only rota's collector (no process or platform collectors)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(RotaCollector(scheduler, budget=budget, scope_depth=scope_depth))
    return found
