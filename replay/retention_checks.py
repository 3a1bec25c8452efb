"""The doctor's retention check: `retention_overdue`.

Warns when a configured policy has payloads more than `GRACE` past their retention (a
`rota retention run` was missed: the log and the projections keep growing), and says how
many prunes the log records. A warning, never a failure: nothing is wrong with the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from rota.application.ports import EventStore
from rota.domain.events import RetentionPolicy
from rota.replay.doctor_report import Check
from rota.replay.retention import plan
from rota.replay.retention_audit import prunes_of

GRACE = timedelta(days=1)
ADVICE = "run 'rota retention run' (daily, from cron or a timer; docs/operator.md)"


def check_retention(log: EventStore, policies: Sequence[RetentionPolicy], now: datetime) -> Check:
    prunes = prunes_of(log)
    done = f"{len(prunes)} prune(s) recorded"
    if prunes:
        last = prunes[-1]
        done += f", the last at position {last.position} (policy {last.event.policy})"
    if not policies:
        return Check("retention_overdue", "ok", f"no retention policy configured; {done}")
    overdue = plan(log, policies, now - GRACE)
    late = [p for p in overdue.policies if p.events]
    if not late:
        return Check("retention_overdue", "ok", f"nothing overdue; {done}")
    what = "; ".join(
        f"policy {p.policy}: {p.events} events of {p.works} Works ({p.bytes_freed} bytes)"
        for p in late
    )
    return Check("retention_overdue", "warn", f"over a day past retention: {what}; {done}", ADVICE)
