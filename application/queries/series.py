"""Series over time for the web view's charts: attempts completed (throughput) and failed
per time bucket, and the mean latency of the attempts that ended in a bucket, by binding.

The outcomes are the log's (`core.execution.completed`; `failed`, `timed_out`, `lost`),
read backwards from the head until the window's start, so a chart of the last hour reads
the last hour of the log; an attempt's latency is from its first segment's start (the
projection's attempt) to the outcome's recorded time.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import msgspec

from rota.application.service import SchedulerService
from rota.application.timestamps import format_timestamp, parse_timestamp

COMPLETED = "core.execution.completed"
FAILED = frozenset({"core.execution.failed", "core.execution.timed_out", "core.execution.lost"})
WINDOW = 500  # events read backwards at a time
LIMIT_EVENTS = 200_000  # a chart reads at most this many events back


class Bucket(msgspec.Struct, frozen=True, kw_only=True):
    start: str  # RFC 3339 UTC
    completed: int
    failed: int
    latency: dict[str, float]  # binding -> mean seconds of the attempts that ended in it


class Series(msgspec.Struct, frozen=True, kw_only=True):
    """`buckets` equal stretches of time ending at `end`, oldest first."""

    start: str
    end: str
    bucket_seconds: float
    buckets: tuple[Bucket, ...]
    bindings: tuple[str, ...]  # every binding with a latency, by name
    truncated: bool  # the window reaches further back than the events read


class SeriesQueries:
    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    def over_time(self, end: datetime, *, hours: float = 24, buckets: int = 24) -> Series:
        """The series of the `hours` before `end`, in `buckets` buckets."""
        if hours <= 0 or buckets <= 0:
            raise ValueError("hours and buckets must be positive")
        start = end - timedelta(hours=hours)
        size = (end - start) / buckets
        completed = [0] * buckets
        failed = [0] * buckets
        spent: list[dict[str, list[float]]] = [defaultdict(list) for _ in range(buckets)]
        store = self.service.store
        with self.service.lock:
            self.service.catch_up()
        top = store.head().position + 1
        read = 0
        truncated = False
        while top > 1:
            low = max(0, top - 1 - WINDOW)
            batch = store.read(low, top - 1 - low)
            top = low + 1
            older = False
            for recorded in reversed(batch):
                at = parse_timestamp(recorded.recorded_at)
                if at < start:
                    older = True
                    break
                if at >= end or (recorded.type != COMPLETED and recorded.type not in FAILED):
                    continue
                index = min(buckets - 1, int((at - start) / size))
                if recorded.type == COMPLETED:
                    completed[index] += 1
                else:
                    failed[index] += 1
                took = self._latency(recorded.event, at)
                if took is not None:
                    spent[index][took[0]].append(took[1])
            read += len(batch)
            if older:
                break
            if read >= LIMIT_EVENTS:
                truncated = top > 1
                break
        names = sorted({b for bucket in spent for b in bucket})
        return Series(
            start=format_timestamp(start),
            end=format_timestamp(end),
            bucket_seconds=size.total_seconds(),
            buckets=tuple(
                Bucket(
                    start=format_timestamp(start + size * i),
                    completed=completed[i],
                    failed=failed[i],
                    latency={b: sum(v) / len(v) for b, v in sorted(spent[i].items())},
                )
                for i in range(buckets)
            ),
            bindings=tuple(names),
            truncated=truncated,
        )

    def _latency(self, event: object, at: datetime) -> tuple[str, float] | None:
        """(binding, seconds from the attempt's first start to `at`), from the projection."""
        work_id, number = getattr(event, "work_id", None), getattr(event, "attempt", None)
        if not isinstance(work_id, str) or not isinstance(number, int):
            return None
        with self.service.lock:
            work = self.service.projection.works.get(work_id)
        if work is None:
            return None
        attempt = next((a for a in work.attempts if a.number == number), None)
        if attempt is None or not attempt.segments or attempt.segments[0].started_at is None:
            return None
        return work.binding, max(0.0, (at - attempt.segments[0].started_at).total_seconds())


__all__ = ["Bucket", "Series", "SeriesQueries"]
