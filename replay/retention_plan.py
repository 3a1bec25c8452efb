"""Retention's dry run: which Works' payloads are due under the policies, and what pruning
them would take (`plan`); `rota.replay.retention` runs it.

An ended Work is pruned whole once its last event is older than its policy's `keep_days`;
a Work that goes on (a standing Work: a schedule's) is pruned in part: its ended attempts
older than that (never its last one) and the inputs only they consumed. The Works are
found from a fold of the log (their states), then one pass over the rows computes each due
row's summary (`rota.infrastructure.retention_summary`).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from datetime import datetime, timedelta

import msgspec

from rota.application.ports import EventStore, RawRecord
from rota.application.ports.timestamps import parse_timestamp
from rota.domain.events import (
    ALL_EVENTS,
    PartialPrune,
    RetentionPolicy,
    ScheduleFired,
    accepted_input,
)
from rota.domain.state import WorkState
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.retention_summary import summary
from rota.replay.audit import iter_raw
from rota.replay.rebuild import folded

PRUNABLE = frozenset(e.tag() for e in ALL_EVENTS if e.pruned_fields)  # types with payloads
# Each type's first version with a payload to prune: an older row has none (a Work's
# definition before it carried its first input), so it neither blocks nor is pruned.
PRUNED_SINCE = {e.tag(): e.pruned_since for e in ALL_EVENTS if e.pruned_fields}


class PolicyPlan(msgspec.Struct):
    """What one policy would prune now: Works, events, payload bytes before and after."""

    policy: str
    works: int = 0
    events: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def bytes_freed(self) -> int:
        return self.bytes_before - self.bytes_after


class Plan(msgspec.Struct):
    """A dry run: per policy, and the rewrites it would make (position, summary, old size)."""

    policies: list[PolicyPlan]
    rows: dict[str, list[tuple[int, bytes, int]]] = msgspec.field(default_factory=dict)
    work_ids: dict[str, list[str]] = msgspec.field(default_factory=dict)
    partial: dict[str, list[PartialPrune]] = msgspec.field(default_factory=dict)
    # Per policy, each Work's share in log order: (Work id, its part when it goes on, rows).
    groups: dict[str, list[tuple[str, PartialPrune | None, list[tuple[int, bytes, int]]]]] = (
        msgspec.field(default_factory=dict)
    )

    @property
    def events(self) -> int:
        return sum(p.events for p in self.policies)


def covers(policy: RetentionPolicy, work: WorkState, fired_by: Set[str] = frozenset()) -> bool:
    """Whether `policy` covers `work` (`fired_by`: the schedules that fired it)."""
    if policy.schedule is not None and policy.schedule not in fired_by:
        return False
    if policy.scope is not None and not (
        work.scope == policy.scope or work.scope.startswith(policy.scope.rstrip("/") + "/")
    ):
        return False
    return policy.binding is None or work.binding == policy.binding


def plan(
    store: EventStore,
    policies: Sequence[RetentionPolicy],
    now: datetime,
    codec: Codec = DEFAULT_CODEC,
) -> Plan:
    """What `run` would prune at `now` (a fold of the log, then one pass over its rows;
    writes nothing).

    An ended Work is pruned whole; a Work that goes on (a standing Work) loses the payloads
    of its ended attempts older than the policy's days (never its last attempt), and of the
    inputs only they consumed. The projections summarize exactly that (`rota.domain.
    retention`), so a Work with a row that cannot be summarized (one stored at an older
    version of its type, which its upcaster reads) is left whole."""
    result = Plan([PolicyPlan(p.name) for p in policies])
    if not policies:
        return result
    scheduler, _ = folded(store)
    fired = _fired(store) if any(p.schedule is not None for p in policies) else {}
    covered: dict[str, int] = {}  # stream -> the policy covering its Work
    parts: dict[str, tuple[set[int], set[int]]] = {}  # a going Work's attempts, inputs
    for work_id, work in scheduler.works.items():
        by: Set[str] = fired.get(work_id, frozenset())
        i = next((i for i, p in enumerate(policies) if covers(p, work, by)), None)
        if i is None:
            continue
        if work.terminal is not None:
            covered[f"work/{work_id}"] = i
        elif old := _old_attempts(work, now - timedelta(days=policies[i].keep_days)):
            covered[f"work/{work_id}"] = i
            parts[f"work/{work_id}"] = old
    last: dict[str, str] = {}
    rows: dict[str, list[tuple[int, bytes, int]]] = {}
    blocked: set[str] = set()
    for row in iter_raw(store):
        stream = row.stream
        if stream not in covered:
            continue
        last[stream] = row.recorded_at
        if stream in blocked:
            continue
        if row.type not in PRUNABLE or row.type_version < PRUNED_SINCE[row.type]:
            continue
        if codec.current.get(row.type) != row.type_version:
            blocked.add(stream)
            rows.pop(stream, None)
            continue
        part = parts.get(stream)
        if part is not None and not _in_part(codec, row, *part):
            continue
        new = summary(codec, row.type, row.type_version, row.data, row.position)
        if new is not None:
            size = len(row.data.encode() if isinstance(row.data, str) else row.data)
            rows.setdefault(stream, []).append((row.position, new, size))
    for stream, found in rows.items():
        i = covered[stream]
        part = parts.get(stream)
        if part is None and parse_timestamp(last[stream]) > now - timedelta(
            days=policies[i].keep_days
        ):
            continue  # not due yet
        p = result.policies[i]
        p.works += 1
        p.events += len(found)
        p.bytes_before += sum(size for _, _, size in found)
        p.bytes_after += sum(len(new) for _, new, _ in found)
        result.rows.setdefault(p.policy, []).extend(found)
        share = None
        if part is None:
            result.work_ids.setdefault(p.policy, []).append(stream[5:])
        else:
            share = PartialPrune(
                work_id=stream[5:], attempts=sorted(part[0]), inputs=sorted(part[1])
            )
            result.partial.setdefault(p.policy, []).append(share)
        result.groups.setdefault(p.policy, []).append((stream[5:], share, found))
    for name, found in result.rows.items():
        found.sort()
        result.work_ids.setdefault(name, []).sort()
        result.groups[name].sort(key=lambda group: group[2][0][0])
    return result


def _old_attempts(work: WorkState, cutoff: datetime) -> tuple[set[int], set[int]] | None:
    """A going Work's ended attempts older than `cutoff` (never its last), and the input
    positions only they consumed; None when it has none."""
    due = {
        a.number
        for a in work.attempts[:-1]
        if a.status == "ended" and a.stop_confirmed and a.ended_at and a.ended_at <= cutoff
    }
    if not due:
        return None

    def inputs(keep: bool) -> set[int]:
        found: set[int] = set()
        for a in work.attempts:
            if (a.number in due) != keep:
                found.update(p.position for p in a.consumed)
                if a.trigger is not None:
                    found.add(a.trigger.position)
        return found

    kept = inputs(False) | {p.position for p in work.pending}
    return due, inputs(True) - kept


def _in_part(codec: Codec, row: RawRecord, attempts: set[int], inputs: set[int]) -> bool:
    """Whether a going Work's row belongs to the part of it a prune takes."""
    event = codec.decode(row.type, row.type_version, row.data, row.position)
    if accepted_input(event) is not None:  # (an input, or one a definition carries)
        return row.position in inputs
    attempt = getattr(event, "attempt", None)
    return isinstance(attempt, int) and attempt in attempts


def _fired(store: EventStore) -> dict[str, set[str]]:
    """Which schedules fired each Work (from the schedule streams' own index)."""
    found: dict[str, set[str]] = {}
    after = 0
    while batch := store.read_prefix("schedule/", after=after, limit=5000):
        for r in batch:
            if isinstance(r.event, ScheduleFired):
                found.setdefault(r.event.work_id, set()).add(r.event.name)
        after = batch[-1].position
    return found


__all__ = ["PRUNABLE", "Plan", "PolicyPlan", "covers", "plan"]
