"""The scheduler projection's flow-control state: the rules in force, the rate buckets,
the fence versions of keys and buckets, pauses, fair share, and two indices (who holds a
slot under each key; ready Work by priority and flow), and the Work holding each
coalescing key (debounce windows, unique Work).

A deterministic fold, like the rest of the projection: `FlowState` and `Fairness` are
persisted as the singleton rows `flow` and `fair` and hashed by `digest()`; the indices
are derived from the Works (`ReadyGroups`, `key_slots`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Protocol

import msgspec

from rota.domain.events import AttemptClaimed, Event
from rota.domain.events.flow import (
    CoalesceKeyTaken,
    FlowConfigured,
    FlowPaused,
    FlowResumed,
    RateTaken,
)
from rota.domain.flow import OLDEST, Fairness, FlowRules, serve
from rota.domain.state import WorkState

Group = tuple[int, str]  # (-priority, flow): the heap order of ready Work's groups
Entry = tuple[int, str]  # (first pending position, work id)


class FlowState(msgspec.Struct, gc=False):
    """What the flow-control events folded to (persisted as one row)."""

    config: FlowConfigured | None = None
    config_version: int = 0
    buckets: dict[str, int] = msgspec.field(default_factory=dict)  # bucket -> tat (µs)
    rate_versions: dict[str, int] = msgspec.field(default_factory=dict)
    keys_version: int = 0  # of `flow/keys`, whose claims fence every limited key
    paused: dict[str, str] = msgspec.field(default_factory=dict)  # "pool:x" -> reason
    pause_version: int = 0
    # Coalescing keys (`rota.domain.coalescing`): "debounce/<key>" or "unique/<key>" -> the
    # Work that took it last; and each key stream's version (fences the next opener).
    holders: dict[str, str] = msgspec.field(default_factory=dict)
    holder_versions: dict[str, int] = msgspec.field(default_factory=dict)


def apply_flow(flow: FlowState, stream: str, version: int, event: Event) -> bool:
    """Fold an event of a flow stream; False when `stream` is none of them."""
    if stream.startswith("coalesce/"):
        if isinstance(event, CoalesceKeyTaken):
            flow.holders[stream[9:]] = event.work_id
        flow.holder_versions[stream] = version
        return True
    if stream.startswith("rate/"):
        if isinstance(event, RateTaken):
            flow.buckets[event.bucket] = event.tat_us
            flow.rate_versions[event.bucket] = version
        return True
    if stream == "flow/keys":
        flow.keys_version = version
        return True
    if stream == "flow/config":
        if isinstance(event, FlowConfigured):
            flow.config = event
        flow.config_version = version
        return True
    if stream == "flow/pauses":
        if isinstance(event, FlowPaused):
            flow.paused[f"{event.target}:{event.name}"] = event.reason
        elif isinstance(event, FlowResumed):
            flow.paused.pop(f"{event.target}:{event.name}", None)
        flow.pause_version = version
        return True
    return False


_NO_FLOW, _NO_FAIR = FlowState(), Fairness()


def flow_bytes(flow: FlowState, fair: Fairness) -> bytes:
    """What `digest()` hashes of flow control: nothing while there is none, so the digests
    of logs written before flow control stay what they were."""
    if flow == _NO_FLOW and fair == _NO_FAIR:
        return b""
    return msgspec.json.encode((flow, fair), order="sorted")


class _HasRules(Protocol):
    @property
    def rules(self) -> FlowRules: ...


def fold_claim(fair: Fairness, owner: _HasRules, work: WorkState, claim: AttemptClaimed) -> bool:
    """Fair share's fold of one claim (`rota.domain.flow.serve`); False when there is
    nothing to fold: until a Work with keys or a priority other than 0 starts, every
    ready Work is in one group, served in readiness order, which needs no tags (and the
    digests of logs from before flow control stay what they were)."""
    asked, rules = work.flow, owner.rules
    if (asked is None or not (asked.keys or asked.priority)) and not (
        fair.finish or fair.since_oldest or fair.vtime or rules.scopes
    ):
        return False
    flow = rules.flow(work.keys, work.scope)
    serve(fair, flow, rules.weight(flow), OLDEST in claim.passes)
    return True


PLAIN: Group = (0, "")  # the group of Work that asks for no flow control


class ReadyGroups:
    """Startable Works by group (priority, then flow), each group a heap of (first pending
    position, id) with lazy deletion: an entry whose Work is no longer startable at that
    input, in that group, is dropped when met. `groups()` hands each group out lazily; the
    entries a pass took are put back at the next call, those still valid only."""

    def __init__(
        self, find: Callable[[Entry], WorkState | None], scoped: FlowRules | None = None
    ) -> None:
        # The rules when they give scopes weights (a Work without keys is then in its
        # scope's flow, `FlowRules.flow`); None: every such Work is in flow "".
        self.scoped = scoped
        self.heaps: dict[Group, list[Entry]] = {}
        self._find = find
        self._found: list[tuple[Group, Entry]] = []

    def index(self, before: WorkState | None, after: WorkState) -> None:
        """Give the startable `after` an entry unless `before` (its state before, when that
        was startable too; else None) left it one that still holds (the same first input,
        in the same group)."""
        position = after.pending[0].position
        if (
            before is not None
            and before.pending[0].position == position
            and (before.flow is after.flow or before.priority == after.priority)
        ):
            return
        group = PLAIN if after.flow is None and self.scoped is None else self.group(after)
        heap = self.heaps.get(group)
        if heap is None:
            heap = self.heaps[group] = []
        heapq.heappush(heap, (position, after.work_id))

    def groups(self) -> dict[Group, Iterator[WorkState]]:
        """Each group's startable Works, oldest first, lazily (see the class docstring)."""
        find = self._find
        for group, entry in self._found:  # (still startable there, in this group?)
            work = find(entry)
            if work is not None and self.group(work) == group:
                heap = self.heaps.get(group)
                if heap is None:
                    heap = self.heaps[group] = []
                heapq.heappush(heap, entry)
        self._found = []
        for group in [g for g, heap in self.heaps.items() if not heap]:
            del self.heaps[group]
        return {group: self._drain(group, heap) for group, heap in self.heaps.items()}

    def group(self, work: WorkState) -> Group:
        """The group a Work is in: (-priority, flow)."""
        asked, scoped = work.flow, self.scoped
        if asked is not None and asked.keys:
            return (-asked.priority, asked.keys[0])
        flow = "" if scoped is None else scoped.scope_flow(work.scope)
        return (0 if asked is None else -asked.priority, flow)

    def _drain(self, group: Group, heap: list[Entry]) -> Iterator[WorkState]:
        seen: set[str] = set()
        found, find, (level, flow) = self._found, self._find, group
        while heap:
            entry = heapq.heappop(heap)
            if entry[1] in seen:
                continue
            work = find(entry)  # (still startable there, in this group?)
            if work is None:
                continue
            if work.flow is None and self.scoped is None:
                if level or flow:
                    continue
            elif self.group(work) != group:
                continue
            seen.add(entry[1])
            found.append((group, entry))
            yield work

    def ordered(self, limit: int | None = None) -> list[WorkState]:
        """Startable Works by priority then readiness (at most `limit`): explain and the
        capacity view, which show every group at once."""
        streams = [
            ((group[0], work.pending[0].position, work.work_id, work) for work in works)
            for group, works in self.groups().items()
        ]
        merged = heapq.merge(*streams, key=lambda item: item[:3])
        return [item[3] for item in islice(merged, limit)]
