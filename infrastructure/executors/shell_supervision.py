"""Supervision of one shell run: watching its group to its end, stopping it when due,
and reading back its Result (see `shell.py`, "Process groups" and "Outcome").
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rota.application.ports import Done, LaunchContext
from rota.domain.errors import LeaseLost
from rota.domain.results import Result
from rota.infrastructure.executors.shell_processes import (
    POLL_SECONDS,
    GroupStopper,
    group_running,
    proc_stat,
)
from rota.infrastructure.executors.shell_result import build_result
from rota.infrastructure.executors.shell_runs import read_status, read_tail
from rota.infrastructure.executors.shell_spawner import Child


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
    return build_result(
        read_status(run.directory), reason,
        read_tail(run.directory / "stdout", capture_bytes),
        read_tail(run.directory / "stderr", capture_bytes),
        run.secrets, isinstance(run.ctx.cancel_reason, LeaseLost), _minutes(run),
    )  # fmt: skip


def leader_running(run: Run) -> bool:
    """Whether the run's group leader (the wrapper) still runs."""
    if run.proc is not None:
        return run.proc.poll() is None
    stat = proc_stat(run.pid)
    return stat is not None and stat[0] not in ("Z", "X") and run.started in (None, stat[2])


def _group_alive(run: Run) -> bool:
    """Whether the run's group still runs; never mistakes a reused pid's group for it."""
    stat = proc_stat(run.pid)
    if stat is not None and run.started is not None and stat[2] != run.started:
        return False  # the pid names another process: our group had emptied before
    return group_running(run.pid)


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
        with contextlib.suppress(OSError):
            began = (run.directory / "input.json").stat().st_mtime
    return max(0.0, end - began) / 60
