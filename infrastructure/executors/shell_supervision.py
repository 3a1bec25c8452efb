"""Supervision of shell runs: watching a group to its end, stopping it when due, and
reading back its Result (see `shell.py`, "Process groups" and "Outcome").

The launched runs are watched by one `Reaper` thread, which waits on all of their pidfds
at once (poll(2)) and reports each run that ended on its own with its group empty; a run
that must be stopped (cancelled, past its deadline, the executor closing), that left
something running in its group, or that has no pidfd is handed to a thread of its own
running `supervise`. No thread is started per run in the common case.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rota.application.ports import Done, LaunchContext
from rota.domain.errors import LeaseLost
from rota.domain.results import Result
from rota.infrastructure.executors.shell_processes import (
    POLL_SECONDS,
    GroupStopper,
    group_answers,
    group_running,
    proc_stat,
)
from rota.infrastructure.executors.shell_result import build_result
from rota.infrastructure.executors.shell_runs import read_status, read_tail
from rota.infrastructure.executors.shell_spawner import Child

SETTLE_SECONDS = 0.01  # how long an ended leader's zombie may take to be reaped by its parent


@dataclass
class Run:
    """One shell run a ShellExecutor watches, launched here or adopted by recovery."""

    ctx: LaunchContext
    done: Done
    directory: Path
    pid: int  # the wrapper: it leads the group (pgid == pid)
    started: int | None
    secrets: tuple[str, ...]
    proc: Child | None = None  # the wrapper we launched; None: adopted from an earlier owner
    began: float = 0.0  # time.monotonic() at launch
    group: bool = True  # False: only report the status (the pid means nothing here)
    budget_end: float = 0.0  # time.monotonic() at which its run time is spent

    def __post_init__(self) -> None:
        # What is left of its run time, measured from here by the monotonic clock. A run
        # still watched when a recovery hands it a new context keeps this budget.
        left = (self.ctx.deadline - datetime.now(UTC)).total_seconds()
        self.budget_end = time.monotonic() + left


def supervise(run: Run, closed: threading.Event, grace: float, capture_bytes: int) -> Result | None:
    """Watch the run's group to its end, stopping it when cancelled, closed or past its
    deadline; its Result (None: closed while watching an adopted run, left running)."""
    stopper = GroupStopper(run.pid, grace)
    reason: str | None = None
    while run.group:
        ended = not leader_running(run) or read_status(run.directory) is not None
        if not ended and reason is None:
            reason = _stop_reason(run, closed)
            if reason == "closed":
                return None
        if ended and not _group_alive(run):
            break
        if (reason or ended) and not stopper.step(time.monotonic()):
            break  # SIGKILL sent long ago and something still lingers
        proc = run.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL_SECONDS)
        else:
            time.sleep(POLL_SECONDS)
    return _result(run, read_status(run.directory), reason, capture_bytes)


def ended_result(run: Run, capture_bytes: int) -> Result | None:
    """The Result of a launched run whose wrapper exited after recording `status` and whose
    group is empty; None if anything else holds (it needs `supervise`)."""
    if run.proc is None or not run.group or leader_running(run):
        return None
    status = read_status(run.directory)
    if status is None or _group_alive(run, 0.0):  # the reaper gave it SETTLE_SECONDS
        return None
    return _result(run, status, None, capture_bytes)


def _result(run: Run, status: int | None, reason: str | None, capture_bytes: int) -> Result:
    return build_result(
        status, reason,
        read_tail(os.path.join(run.directory, "stdout"), capture_bytes),
        read_tail(os.path.join(run.directory, "stderr"), capture_bytes),
        run.secrets, isinstance(run.ctx.cancel_reason, LeaseLost), _minutes(run),
    )  # fmt: skip


def leader_running(run: Run) -> bool:
    """Whether the run's group leader (the wrapper) still runs."""
    if run.proc is not None:
        return run.proc.poll() is None
    stat = proc_stat(run.pid)
    return stat is not None and stat[0] not in ("Z", "X") and run.started in (None, stat[2])


def _group_alive(run: Run, settle: float = SETTLE_SECONDS) -> bool:
    """Whether the run's group still runs; never mistakes a reused pid's group for it."""
    if not group_answers(run.pid):
        return False  # no group of that id at all: nothing to look up in /proc
    stat = proc_stat(run.pid)
    if stat is not None and run.started is not None and stat[2] != run.started:
        return False  # the pid names another process: our group had emptied before
    return group_running(run.pid, settle)


def _stop_reason(run: Run, closed: threading.Event) -> str | None:
    if run.ctx.cancel.is_set():
        return "cancelled"
    if closed.is_set():
        return "cancelled" if run.proc is not None else "closed"
    # Both clocks, as the host's rule (docs/operator.md, "Clock jumps"): a wall-clock step
    # forward past the deadline does not time the run out while run time is left.
    if time.monotonic() >= run.budget_end and datetime.now(UTC) >= run.ctx.deadline:
        return "timed_out"
    return None


def _minutes(run: Run) -> float:
    if run.proc is not None:
        return (time.monotonic() - run.began) / 60
    end = began = time.time()
    with contextlib.suppress(OSError):
        end = (run.directory / "status").stat().st_mtime
    if run.group and run.started is not None:  # boot-relative ticks, same boot
        with contextlib.suppress(OSError, ValueError, AttributeError):
            ticks = os.sysconf("SC_CLK_TCK")
            began -= time.clock_gettime(time.CLOCK_BOOTTIME) - run.started / ticks
    else:
        # When it was let go (`go`), else when its input was written (an older launch).
        for name in ("go", "input.json"):
            with contextlib.suppress(OSError):
                began = (run.directory / name).stat().st_mtime
                break
    return max(0.0, end - began) / 60


class Reaper:
    """One thread watching the pidfds of launched runs (see the module docstring)."""

    def __init__(
        self,
        closed: threading.Event,
        ended: Callable[[Run], None],
        handoff: Callable[[Run], None],
    ) -> None:
        self._closed = closed
        self._ended = ended  # on the reaper's thread: the run's wrapper exited
        self._handoff = handoff  # the run needs a `supervise` thread of its own
        self._lock = threading.Lock()
        self._added: list[tuple[int, Run]] = []  # our own copy of its pidfd, the run
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._woken, self._waker = os.pipe()
        os.set_blocking(self._waker, False)

    def add(self, run: Run) -> bool:
        """Watch a launched run; False if it cannot be (no pidfd, or closing)."""
        fd = run.proc.watch_fd() if run.proc is not None else None
        if fd is None:
            return False
        with self._lock:
            if self._stopped:
                os.close(fd)
                return False
            self._added.append((fd, run))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="rota-shell-reaper", daemon=True
                )
                self._thread.start()
        self.wake()
        return True

    def wake(self) -> None:
        with self._lock, contextlib.suppress(OSError):  # full: it is awake already
            if self._waker >= 0:
                os.write(self._waker, b"w")

    def join(self, timeout: float) -> None:
        """Wait for the thread to end (it does once `closed` is set and it was woken), then
        close the wake pipe; nothing is watched from then on."""
        with self._lock:
            self._stopped = True  # never started, or ending: `add` refuses from now on
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return  # still busy: leave its pipe open
        with self._lock:
            for fd in (self._woken, self._waker):
                if fd >= 0:
                    os.close(fd)
            self._woken = self._waker = -1

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self._woken, select.POLLIN)
        runs: dict[int, Run] = {}
        settling: dict[int, tuple[Run, float]] = {}  # exited: its zombie is being reaped
        while True:
            with self._lock:
                added, self._added = self._added, []
                if self._closed.is_set():
                    self._stopped = True
            for fd, run in added:
                runs[fd] = run
                poller.register(fd, select.POLLIN)
            if self._stopped:
                for fd in list(runs):
                    self._handoff(self._drop(poller, runs, fd))  # `supervise` stops it
                for run, _ in settling.values():
                    self._ended(run)
                return
            # Cancellation is an Event and the deadline a clock reading: looked at every
            # POLL_SECONDS while something runs, as `supervise` does. A wrapper that exited
            # is looked at again every millisecond until its parent reaped it (its group
            # no longer answers) or SETTLE_SECONDS passed: only then is its group judged.
            timeout = 1 if settling else int(POLL_SECONDS * 1000) if runs else None
            events = poller.poll(timeout)
            now = time.monotonic()
            for fd, _ in events:
                if fd == self._woken:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._woken, 4096)
                    continue
                run = self._drop(poller, runs, fd)
                settling[id(run)] = (run, now + SETTLE_SECONDS)
            for key, (run, until) in list(settling.items()):
                if now >= until or not group_answers(run.pid):
                    del settling[key]
                    self._ended(run)
            for fd, run in list(runs.items()):
                if _stop_reason(run, self._closed) is not None:
                    self._handoff(self._drop(poller, runs, fd))

    @staticmethod
    def _drop(poller: select.poll, runs: dict[int, Run], fd: int) -> Run:
        poller.unregister(fd)
        os.close(fd)
        return runs.pop(fd)
