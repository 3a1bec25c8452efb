"""The daemon loop of an embedded scheduler: tick, then sleep until something can happen
(another process's commit wakes it), until stopped; and the audit checkpoints it writes.

While its store takes no writes (a failover: `rota.store_health`) the loop runs no pass,
probes the store with backoff instead, and says so once per change of state. The newest
checkpoint is pinned in the store (`EventStore.known_head`) when the loop starts and each
time one is written, so a log that later lacks it refuses writes (`log_regressed`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rota.application.host import Host, TickReport
from rota.application.ports import EventStore
from rota.domain.errors import RotaError
from rota.infrastructure.config import EntryCode
from rota.infrastructure.config_models import AuditModel
from rota.replay.checkpoint import Checkpoint, Checkpointer, CheckpointError, latest
from rota.store_health import StoreHealth

if TYPE_CHECKING:
    from rota.scheduler import Scheduler

log = logging.getLogger("rota.scheduler")  # the facade's logger, as before the loop moved here
COUNTED = ("started", "finished", "timed_out", "lost", "recovered", "relaunched", "fired")
CADENCE_SECONDS = 5.0  # the longest the loop sleeps between passes when nothing is due


class PassRecord:
    """What the loop's passes did, for /healthz, /v1/scheduler and /metrics: when the last
    pass ended (monotonic and wall time), how long it took, how many ran and failed."""

    def __init__(self) -> None:
        self.started_at: float = time.monotonic()
        self.last_at: float | None = None  # time.monotonic() at the end of the last pass
        self.last_wall: float | None = None  # time.time() at the end of the last pass
        self.last_seconds = 0.0
        self.seconds_total = 0.0
        self.passes = 0
        self.failed = 0
        self.last_report: TickReport | None = None
        # What every pass did, summed (recovered, relaunched, lost ...: TickReport's counts).
        self.totals: dict[str, int] = {}

    def record(self, began: float, report: TickReport | None) -> None:
        now = time.monotonic()
        self.last_at, self.last_wall = now, time.time()
        self.last_seconds = now - began
        self.seconds_total += self.last_seconds
        self.passes += 1
        if report is None:
            self.failed += 1
        else:
            self.last_report = report
            for name in COUNTED:
                self.totals[name] = self.totals.get(name, 0) + getattr(report, name)


WATCH_SECONDS = 30.0  # the longest the log watcher waits in one call (woken earlier on stop)


class AuditCheckpoints:
    """The audit checkpoints of a scheduler (`[audit]`), written when due; the newest is
    pinned in the store (`EventStore.known_head`): at open, and after each one written."""

    def __init__(self, store: EventStore, audit: AuditModel) -> None:
        self.checkpointer: Checkpointer | None = None
        self.store = store
        self._error: str | None = None
        if audit.checkpoint_dir:
            self.checkpointer = Checkpointer(
                store,
                audit.checkpoint_dir,
                key_path=audit.key,
                every_events=audit.every_events,
                every_seconds=audit.every_seconds,
            )
            try:
                newest = latest(audit.checkpoint_dir, store.store_id)
            except CheckpointError as exc:  # doctor names the bad file; the loop goes on
                log.error("audit checkpoints not read: %s: %s", exc.code, exc)
            else:
                self._pin(newest)

    def _pin(self, checkpoint: Checkpoint | None) -> None:
        if checkpoint is not None:
            self.store.known_head(checkpoint.position, checkpoint.head_hash)

    def write_due(self) -> None:
        """Write a checkpoint when one is due; a failure is logged once per code, not raised."""
        if self.checkpointer is None:
            return
        try:
            written = self.checkpointer.maybe_write()
        except (RotaError, OSError) as exc:
            code = getattr(exc, "code", "checkpoint_io")
            if code != self._error:
                log.error("audit checkpoint not written: %s: %s", code, exc)
            self._error = code
        else:
            self._error = None
            self._pin(written)


class DaemonLoop:
    """`Scheduler.run`, `run_until_idle` and `stop`: one loop over a host and its log."""

    def __init__(self, host: Host, store: EventStore, checkpoint: Callable[[], None]) -> None:
        self.host, self.store, self.checkpoint = host, store, checkpoint
        self.stopped = threading.Event()
        self.passes = PassRecord()
        self.health = StoreHealth(store)  # whether the store takes writes (failover)
        self.running = False
        # Wake-up counts (tests and bench.daemon read them): how often the log watcher saw
        # a commit (a nudge or NOTIFY woke it) or timed out (a slow look); the passes are
        # counted in `passes`.
        self.commits_seen = 0
        self.watch_timeouts = 0

    def stop(self) -> None:
        """Ask a running `run()` to stop (it releases the leases it holds)."""
        self.stopped.set()
        self.host.wake.set()

    def run_until_idle(self, timeout: float | None = None) -> TickReport:
        """`Scheduler.run_until_idle`: passes until the host is idle (or `timeout` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        report = self.host.tick()
        while not self.host.idle() and not self.stopped.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                raise RotaError(
                    f"still busy after {timeout} s: {len(self.host.held)} attempts running",
                    code=EntryCode.TIMEOUT,
                )
            self.host.wake.wait(min(self.host.next_wake(0.5), 0.5))
            self.host.wake.clear()
            report = self.host.tick()
        return report

    def run(self, stop: threading.Event | None = None, *, drain: float = 0.0) -> None:
        """Tick, then sleep until something can happen, until `stop` or `self.stopped`.

        Stopping is graceful: nothing new starts, and the leases held are released (the
        attempts become recoverable; detached processes are left running for the next host
        to adopt). With `drain` seconds, the loop first goes on observing and renewing, for
        at most that long, until the attempts it holds have ended."""
        stop = stop or self.stopped
        if stop is not self.stopped:
            threading.Thread(target=self._forward_stop, args=(stop,), daemon=True).start()
        watcher = threading.Thread(target=self._watch_log, args=(stop,), daemon=True)
        watcher.start()
        self.running = True
        failures = 0
        drain_until: float | None = None
        health = self.health
        try:
            while True:
                if stop.is_set() or self.stopped.is_set():
                    if drain_until is None:
                        drain_until = time.monotonic() + max(0.0, drain)
                        self.host.starting = False
                        if drain > 0:
                            log.info("draining for at most %.0f s: nothing new starts", drain)
                    if not self.host.busy() or time.monotonic() >= drain_until:
                        break
                    if not health.writable:
                        break  # nothing to drain into: the leases expire on their own
                if not health.writable:
                    # No pass (no claim, no launch) until the store takes writes again; the
                    # attempts running go on (rota.store_health).
                    health.wait_until_writable(stop)
                    continue
                began = time.monotonic()
                report: TickReport | None = None
                try:
                    report = self.host.tick()
                    failures = 0
                    self.passes.record(began, report)
                    if health.observe():
                        continue  # the pass met a store that takes no writes (said once)
                    for error in report.errors:
                        log.warning("scheduler pass: %s", error)
                    self.checkpoint()
                    pause = self.host.next_wake(5.0)  # (the store's clock: it may fail too)
                except Exception:
                    if report is None:
                        self.passes.record(began, None)
                    if health.observe():
                        continue  # said once, by the state change: no traceback a pass
                    # One bad pass never kills the daemon: report it, back off, go on.
                    failures += 1
                    log.exception("scheduler pass failed (%d in a row)", failures)
                    self.host.wake.wait(min(5.0, 0.1 * 2**failures))
                    self.host.wake.clear()
                    continue
                if drain_until is not None:
                    pause = min(pause, 0.5, max(0.0, drain_until - time.monotonic()))
                self.host.wake.wait(pause)
                self.host.wake.clear()
        finally:
            self.running = False
            stop.set()
            self.stopped.set()
            try:
                self.host.release_all()
                self.checkpoint()
            except RotaError as exc:  # a store that takes no writes: the leases expire
                log.warning("leases not released on the way out: %s: %s", exc.code, exc)
            self.store.wake_waiters()
            watcher.join(timeout=5)

    def _forward_stop(self, stop: threading.Event) -> None:
        stop.wait()  # set by the caller, or by `run` itself when the loop ends
        if not self.stopped.is_set():
            self.stop()

    def _watch_log(self, stop: threading.Event) -> None:
        """Wake the loop on every commit to the log, from any process (the store's wait is
        woken by a nudge or NOTIFY; it only looks at the head itself now and then)."""
        position: int | None = None
        failing = False
        while not stop.is_set():
            try:
                if position is None:
                    position = self.store.head().position
                if self.store.wait_for_commit(position, WATCH_SECONDS):
                    head = self.store.head().position
                    quiet = self.host.launches.only_launch_writes(position, head)
                    position = head
                    self.commits_seen += 1
                    if not quiet:  # a launch's own pin gives the cadence nothing to do
                        self.host.wake.set()
                else:
                    self.watch_timeouts += 1
                failing = False
            except RotaError as exc:
                if stop.is_set():
                    return
                if not failing:  # once a spell: the store's state change is the loop's line
                    log.info("waiting for commits failed (%s); trying again each second", exc.code)
                failing, position = True, None
                self.host.wake.set()  # the loop finds out what the store says
                stop.wait(1.0)


def run(
    scheduler: Scheduler,
    *,
    log_format: str | None = None,
    log_level: str | None = None,
    drain: float = 0.0,
) -> None:
    """Run `scheduler`'s daemon loop as `rota run` does: until SIGTERM/SIGINT, with every
    record (the decision lines included) on stderr in `log_format` (`text`, `json`) at
    `log_level` and above, the status lines, and `drain` seconds for running attempts on
    the first signal. See `rota.foreground.run` and the guide ("Running the daemon from
    your program")."""
    from rota.foreground import run as run_foreground

    run_foreground(scheduler, log_format=log_format, log_level=log_level, drain=drain)
