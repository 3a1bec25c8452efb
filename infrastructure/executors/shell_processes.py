"""Process groups of shell runs: their liveness, identity and signals, and where a
recorded pid means something (see `shell.py`, "Process groups" and "Stop evidence").
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from rota.infrastructure.executors.shell_runs import wrapper_alive

POLL_SECONDS = 0.05
KILL_WAIT_SECONDS = 5.0  # after SIGKILL, how long to wait for the group to vanish


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """State, process group and start time (field 22) from /proc/<pid>/stat, or None."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = raw[raw.rindex(b")") + 2 :].split()  # the name may hold spaces and parens
        return fields[0].decode(), int(fields[2]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def group_running(pgid: int, settle: float = 0.0) -> bool:
    """True while a process of group `pgid` runs; zombies do not count. With `settle`, a
    group that still answers the signal probe is probed again for up to that many seconds
    before /proc is scanned: a leader that just exited is a zombie until its parent reaps
    it, which takes a moment, while the scan reads every process's stat."""
    until = time.monotonic() + settle
    pause = 0.0002
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        if time.monotonic() >= until:
            break
        time.sleep(pause)  # not waiting for a condition of ours: giving the parent a moment
        pause = min(pause * 2, 0.002)
    if not os.path.isdir("/proc"):
        return True  # the signal probe is all the evidence there is
    stats = (proc_stat(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return any(stat and stat[1] == pgid and stat[0] not in ("Z", "X") for stat in stats)


def group_answers(pgid: int) -> bool:
    """Whether group `pgid` answers the signal probe (zombies included); no /proc scan."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_identity(pid: int, pgid: int, started: int | None) -> bool | None:
    """Whether group `pgid` is the one `pid` led: True, False (the pid was reused) or None."""
    stat = proc_stat(pid)
    if stat is None:  # gone: a group still named by its pid holds only its descendants
        return pid == pgid and os.path.isdir("/proc/self")
    return None if started is None else stat[2] == started


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(pgid: int) -> None:
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while group_running(pgid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS / 5)


class GroupStopper:
    """SIGTERM a process group, then SIGKILL it once the grace period is over."""

    def __init__(self, pgid: int, grace: float) -> None:
        self.pgid, self.grace = pgid, grace
        self.term_at: float | None = None
        self.kill_at: float | None = None

    def step(self, now: float) -> bool:
        """Send the signal now due; False once waiting after SIGKILL is pointless."""
        if self.term_at is None:
            signal_group(self.pgid, signal.SIGTERM)
            self.term_at = now
        elif self.kill_at is None and now - self.term_at >= self.grace:
            signal_group(self.pgid, signal.SIGKILL)
            self.kill_at = now
        return self.kill_at is None or now - self.kill_at < KILL_WAIT_SECONDS


def machine() -> dict[str, Any]:
    """Where a pid means something: host name, boot id and pid namespace (None: unknown)."""
    boot = pidns = None
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.suppress(OSError):
        pidns = os.stat("/proc/self/ns/pid").st_ino
    return {"host": socket.gethostname(), "boot": boot, "pidns": pidns}


def _whereabouts(metadata: dict[str, Any], here: dict[str, Any]) -> str:
    """Where the metadata's pid lives: "here", "elsewhere" (another host), "rebooted" (an
    earlier boot of this host: none of it runs) or "namespace" (another pid namespace)."""

    def differs(key: str) -> bool:
        return None not in (metadata.get(key), here[key]) and metadata[key] != here[key]

    if differs("host"):
        return "elsewhere"
    if differs("boot"):
        return "rebooted"
    return "namespace" if differs("pidns") else "here"


def locate(metadata: dict[str, Any], here: dict[str, Any], directory: Path | None) -> str:
    """ "here", "unknown" (it may run where its pid means nothing here) or "gone"."""
    where = _whereabouts(metadata, here)
    if where == "namespace":  # only the wrapper's lock on its run directory can tell
        where = "unknown" if directory is None or wrapper_alive(directory) else "gone"
    return {"elsewhere": "unknown", "rebooted": "gone"}.get(where, where)


def recorded_ids(metadata: Any) -> tuple[int, int, int | None] | None:
    if not isinstance(metadata, dict):
        return None
    pid, pgid, started = metadata.get("pid"), metadata.get("pgid"), metadata.get("started")
    if type(pid) is not int or type(pgid) is not int or min(pid, pgid) < 2:
        return None  # never signal group 0 (our own), 1 (init) or a negative id
    if started is not None and type(started) is not int:
        return None
    return pid, pgid, started
