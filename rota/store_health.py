"""Whether a daemon's store takes writes, and what the daemon loop does while it does not.

A PostgreSQL store behind a failover can be gone for a while (`store_unavailable`), reach a
server that takes no writes (`store_read_only`: a demoted primary, a replica) or reach a
log that lost acknowledged events (`log_regressed`): `EventStore.state` says which, as the
store last found, without I/O. The loop reads it after every pass; while the store is not
writable it runs no pass (so it claims and launches nothing new; the attempts it launched
keep running, their results wait in the host's queue) and probes the store instead
(`EventStore.probe`: a connection of its own, the server's role, the log against what was
seen), 0.1 s apart doubling to at most `PROBE_MAX`, until the store is writable again; then
the passes resume (a lease that lapsed meanwhile is recovered, and adopted, as after any
pause). It says so once per change of state, never once per pass: one line when the store
stops taking writes (its code and reason: for `log_regressed`, the missing positions and
how to restore them), one when it takes them again (after how long). `/readyz` answers 503
meanwhile, and `/metrics` has `rota_store_writable` and the time spent without it.
"""

from __future__ import annotations

import logging
import threading
import time

from rota.application.ports import EventStore, StoreState
from rota.application.ports.records import WRITABLE
from rota.domain.errors import RotaError

log = logging.getLogger("rota.store")
PROBE_FIRST = 0.1  # seconds before the first probe of a store that stopped taking writes
PROBE_MAX = 1.0  # the longest wait between two probes


class StoreHealth:
    """The daemon's view of its store's writability (see the module docstring)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.state: StoreState = WRITABLE
        self.changes = 0  # transitions between writable and not (each logged once)
        self.probes = 0
        self._since = time.monotonic()  # when the current state began
        self._unwritable_total = 0.0  # seconds spent not writable, before the current spell
        self._lock = threading.Lock()

    @property
    def writable(self) -> bool:
        return self.state.writable

    def unwritable_seconds(self) -> float:
        """Seconds this daemon's store has spent not taking writes (the current spell too)."""
        with self._lock:
            current = 0.0 if self.state.writable else time.monotonic() - self._since
            return self._unwritable_total + current

    def observe(self) -> bool:
        """Read the store's state (no I/O) and log a change; True while not writable."""
        self._set(self.store.state())
        return not self.state.writable

    def wait_until_writable(self, stop: threading.Event) -> None:
        """Probe the store with backoff until it takes writes again, or `stop` is set."""
        pause = PROBE_FIRST
        while not stop.is_set() and not self.state.writable:
            stop.wait(pause)
            if stop.is_set():
                return
            pause = min(pause * 2, PROBE_MAX)
            self.probes += 1
            try:
                found = self.store.probe()
            except RotaError as exc:  # a store that cannot even say: still not writable
                found = StoreState(str(exc.code), str(exc))
            self._set(found)

    def _set(self, found: StoreState) -> None:
        with self._lock:
            before = self.state
            if found == before or (found.code == before.code and not found.writable):
                if found != before:
                    self.state = found  # the same trouble, in other words: no new line
                return
            now = time.monotonic()
            spell = now - self._since
            if not before.writable:
                self._unwritable_total += spell
            self.state, self._since = found, now
            self.changes += 1
        if found.writable:
            log.warning("store writable again after %.1f s; passes resume", spell)
        elif before.writable:
            log.error(
                "store not writable: %s: %s; holding launches (running attempts go on) "
                "and probing until it is",
                found.code,
                found.reason,
            )
        else:
            log.error("store still not writable, now %s: %s", found.code, found.reason)
