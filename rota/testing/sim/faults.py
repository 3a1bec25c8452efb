"""Faults at every step: a store handle that fails or crashes its host when told.

`FaultyStore` wraps one host's handle on the shared log. Before and after every append,
and before every read, it asks the world's `FaultPlan` (one seeded random source) what
happens: nothing, a transient store error (`StoreUnavailable`, what a dropped connection
or a busy database gives), or a crash of the host, either before the append (nothing
written) or after it committed and before the caller heard so (the write is durable and
its acknowledgement is lost: a retry must reuse its delivery identity). A host whose
store broke for a while (a lasting fault: its connection is down) fails every call until
the fault ends or the host is restarted.

A crash is `SimCrash`, a `BaseException`: no `except Exception` in rota catches it, so it
unwinds the host's stack as a SIGKILL would end it, and the world drops the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from random import Random

from rota.application.errors import StoreUnavailable
from rota.application.ports import (
    AppendResult,
    EventStore,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
    TreeHead,
)


class SimCrash(BaseException):
    """The simulated host died here (a SIGKILL between two steps of its code)."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def roll(random: Random, rate: float, kind: str, counts: dict[str, int]) -> bool:
    """Whether a fault of `kind` happens now at `rate` (a rate of 0 draws nothing), counted
    in `counts`: the one roll every fault of a run goes through (store and executor)."""
    if rate <= 0.0 or random.random() >= rate:
        return False
    counts[kind] = counts.get(kind, 0) + 1
    return True


@dataclass
class FaultRates:
    """How often each store fault happens, per call (0 disables it)."""

    crash_before_append: float = 0.0
    crash_after_append: float = 0.0
    append_error: float = 0.0
    read_error: float = 0.0
    permanent: float = 0.0  # a store error that lasts (30 s to 15 min, or to a restart)
    # Another host steps between a decision and its append (what PostgreSQL's sessions
    # do at will): the append's expected versions must catch what that step wrote.
    interleave: float = 0.0

    @classmethod
    def none(cls) -> FaultRates:
        return cls()

    @classmethod
    def default(cls) -> FaultRates:
        return cls(
            crash_before_append=0.002,
            crash_after_append=0.002,
            append_error=0.01,
            read_error=0.002,
            permanent=0.0002,
            interleave=0.05,
        )


@dataclass
class FaultPlan:
    """The seeded decisions of one run's store faults, and what they did (counted)."""

    random: Random
    rates: FaultRates
    armed: bool = True  # off while the world itself reads (invariants, the client)
    counts: dict[str, int] = field(default_factory=dict)
    # The world's step of another host than the one named (None: no interleaving).
    preempt: Callable[[str], None] | None = None
    now: Callable[[], float] = lambda: 0.0  # true time (the world's clock)
    _nested: bool = False

    def interleave(self, host: str) -> None:
        """Maybe let another host take a step now, before `host`'s append (not nested)."""
        if self.preempt is None or self._nested or not self.happens("interleave"):
            return
        self._nested = True
        try:
            self.preempt(host)
        finally:
            self._nested = False

    def happens(self, kind: str) -> bool:
        return self.armed and roll(self.random, getattr(self.rates, kind), kind, self.counts)

    @contextlib.contextmanager
    def disarmed(self) -> Iterator[None]:
        armed, self.armed = self.armed, False
        try:
            yield
        finally:
            self.armed = armed


class FaultyStore(EventStore):
    """One host's handle on the log, failing as its `FaultPlan` says (module docstring)."""

    def __init__(self, inner: EventStore, plan: FaultPlan, host: str) -> None:
        self.inner = inner
        self.plan = plan
        self.host = host
        self.url = inner.url
        self.path = inner.path
        self.clock = inner.clock
        # A lasting fault (this host's connection is down): every call fails until true
        # time `broken_until`, or until the host restarts.
        self.broken_until: float | None = None
        self.dead = False  # the host crashed: its code must not write again

    # -- fault points ---------------------------------------------------------------------

    def _enter(self, kind: str) -> None:
        if self.dead:
            raise SimCrash(f"{self.host}: a dead host's code went on")
        if self.broken:
            raise StoreUnavailable(f"the store is unreachable from {self.host} (lasting)")
        if self.plan.happens("permanent"):
            self.broken_until = self.plan.now() + self.plan.random.uniform(30.0, 900.0)
            raise StoreUnavailable(f"the store became unreachable from {self.host}")
        if self.plan.happens(kind):
            raise StoreUnavailable(f"the store failed a call of {self.host} (transient)")

    @property
    def broken(self) -> bool:
        """Whether a lasting fault holds now."""
        return self.broken_until is not None and self.plan.now() < self.broken_until

    def _crash(self, where: str) -> None:
        self.dead = True
        raise SimCrash(f"{self.host}: crashed {where}")

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        if not self.dead and self.plan.happens("crash_before_append"):
            self._crash("before an append")
        self._enter("append_error")
        self.plan.interleave(self.host)
        if self.dead:  # (the world stepped another host; nothing of this one changed)
            raise SimCrash(f"{self.host}: a dead host's code went on")
        result = self.inner.append(events, expected)
        if result.written and self.plan.happens("crash_after_append"):
            self._crash("after an append committed, before its acknowledgement")
        return result

    def read(self, after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        self._enter("read_error")
        return self.inner.read(after, limit)

    def read_stream(self, stream: str, after: int = 0) -> list[RecordedEvent]:
        self._enter("read_error")
        return self.inner.read_stream(stream, after)

    def read_streams(self, streams: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        self._enter("read_error")
        return self.inner.read_streams(streams)

    def read_prefix(
        self, prefix: str, after: int = 0, limit: int = 1000, upto: int | None = None
    ) -> list[RecordedEvent]:
        self._enter("read_error")
        return self.inner.read_prefix(prefix, after, limit, upto)

    def stream_version(self, stream: str) -> int:
        self._enter("read_error")
        return self.inner.stream_version(stream)

    def read_raw(self, after: int = 0, limit: int = 1000) -> list[RawRecord]:
        self._enter("read_error")
        return self.inner.read_raw(after, limit)

    def find_delivery(self, delivery_id: str) -> RecordedEvent | None:
        self._enter("read_error")
        return self.inner.find_delivery(delivery_id)

    def head(self) -> LogHead:
        self._enter("read_error")
        return self.inner.head()

    def tree_head(self, size: int | None = None) -> TreeHead:
        self._enter("read_error")
        return self.inner.tree_head(size)

    def inclusion_path(self, position: int, size: int) -> list[bytes]:
        self._enter("read_error")
        return self.inner.inclusion_path(position, size)

    def consistency_path(self, old_size: int, new_size: int) -> list[bytes]:
        self._enter("read_error")
        return self.inner.consistency_path(old_size, new_size)

    def tree_nodes(self, level: int, after: int = -1, limit: int = 1000) -> list[tuple[int, bytes]]:
        self._enter("read_error")
        return self.inner.tree_nodes(level, after, limit)

    # -- passed through (no fault point) ---------------------------------------------------

    @property
    def store_id(self) -> str:
        return self.inner.store_id

    def unfinished_import(self) -> str | None:
        return self.inner.unfinished_import()

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        return False  # never waits: the world decides what happens next

    def wake_waiters(self) -> None:
        return None

    def deferring(self, *, ahead: bool = False) -> contextlib.AbstractContextManager[None]:
        return self.inner.deferring(ahead=ahead)

    def sync(self) -> None:
        if self.dead:
            raise SimCrash(f"{self.host}: a dead host's code went on")
        self.inner.sync()

    def nothing_after(self, position: int) -> bool:
        return self.inner.nothing_after(position)

    def now(self) -> datetime:
        return self.inner.now()

    def close(self) -> None:
        self.inner.close()
