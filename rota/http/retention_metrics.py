"""The retention families of `/metrics`: payload bytes pruned, the log file's bytes in use,
and when the last prune was recorded.

`rota_retention_bytes{state="pruned"}` is the payload bytes every recorded prune gave up
(each `core.retention.pruned`'s bytes less its summaries'), tallied from the `retention`
stream incrementally (a scrape reads only the events after the last one it saw).
`rota_retention_bytes{state="retained"}` is what the log's file holds in use (its pages less
the free ones, SQLite); a store with no file (PostgreSQL, memory) exports no `retained`
series rather than scan its whole log at every scrape.
`rota_retention_last_prune_timestamp_seconds` is the recording time of the newest prune
(no series before the first).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rota.application.timestamps import parse_timestamp
from rota.domain.events import RetentionPruned
from rota.scheduler import Scheduler

Admit = Callable[[GaugeMetricFamily | CounterMetricFamily, list[str], float], bool]
STREAM = "retention"


class PruneTally:
    """Payload bytes pruned and the newest prune's time, folded from the log as it grows."""

    def __init__(self) -> None:
        self.after = 0
        self.pruned = 0
        self.last: float | None = None
        self._lock = threading.Lock()

    def update(self, scheduler: Scheduler) -> tuple[int, float | None]:
        with self._lock:
            for recorded in scheduler.store.read_stream(STREAM, self.after):
                self.after = recorded.version
                event = recorded.event
                if isinstance(event, RetentionPruned):
                    self.pruned += event.bytes - event.summary_bytes
                    self.last = parse_timestamp(recorded.recorded_at).timestamp()
            return self.pruned, self.last


def families(scheduler: Scheduler, tally: PruneTally, admit: Admit) -> Iterator[Metric]:
    pruned, last = tally.update(scheduler)
    size = GaugeMetricFamily(
        "rota_retention_bytes",
        "Payload bytes given up by retention prunes (pruned); the log file's bytes in use "
        "(retained, SQLite)",
        labels=["state"],
    )
    admit(size, ["pruned"], pruned)
    space = scheduler.store.storage()
    if space is not None:
        admit(size, ["retained"], (space.pages - space.free) * space.page_size)
    yield size
    if last is not None:
        when = GaugeMetricFamily(
            "rota_retention_last_prune_timestamp_seconds",
            "When the newest retention prune was recorded (Unix time)",
        )
        admit(when, [], last)
        yield when
