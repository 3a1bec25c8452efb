"""Optimisation: one fsync per cadence pass instead of one per append (bench lifecycle).

One durability wait for a cadence pass's appends, taken before anything acts on them.

On a store whose commits can be made durable after the fact (`EventStore.deferring`:
SQLite on synchronous FULL fsyncs its WAL after the commit), each append of a pass (the
outcomes it observed, renewals, claims, invoke markers) would wait for an fsync of its
own: three or more per pass, each several milliseconds. The host runs a pass inside
`one_pass()` instead, which defers them, and makes everything the pass appended durable
in one `sync()`:
- at the end of the pass, before its report is returned;
- and at once, mid-pass, before anything outside the store is told of it or acts on it
  (`durable()`): a launch (the invoke marker is durable before the executor is called), a
  task handed to the launcher (an adoption, a stop check, a control delivery, a forget),
  a start gate asked, a launch cancelled because its attempt timed out.
So no executor, gate or caller ever sees an effect of a write that a crash could still
take back, as before; only the waits are shared. Commits are visible to other threads
and processes before they are durable, as they already were between a commit and its
sync. A store whose commits are durable at once (PostgreSQL) is unaffected: its
`deferring()` and `sync()` do nothing. (The pass defers `ahead`: SQLite starts a deferred
commit's fsync at once when its disk is idle, `WalSync.begin`, so that the pass's one wait
is often over by the time it comes; the pass still waits once, and acts on nothing before.)

The deferral is the pass's thread's own (a store counts pending commits per thread):
`durable()` called on any other thread does nothing, since that thread's appends were
made durable by their own transactions.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from rota.application.ports import EventStore


class PassSync:
    """The deferral of one cadence pass's durability waits; see the module docstring."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._owner: int | None = None  # the thread running a pass, if any
        self._deferral: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def one_pass(self) -> Iterator[None]:
        """Defer the durability of this thread's appends until the block ends (or until
        `durable()` is called on it); the block's end syncs them."""
        self._owner = threading.get_ident()
        self._defer()
        try:
            yield
        finally:
            self._owner = None
            self._sync()

    def durable(self) -> None:
        """Make what this thread's pass appended so far durable now, before something
        outside the store acts on it; the rest of the pass is deferred again."""
        if self._owner != threading.get_ident():
            return
        self._sync()
        self._defer()

    def _defer(self) -> None:
        deferral = contextlib.ExitStack()
        deferral.enter_context(self.store.deferring(ahead=True))
        self._deferral = deferral

    def _sync(self) -> None:
        deferral, self._deferral = self._deferral, None
        if deferral is not None:
            deferral.close()
        self.store.sync()
