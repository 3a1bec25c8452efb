"""The wrapper that leads every shell run's process group: its script, starting it in a
run directory, and letting its command go once the launch is pinned.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rota.application.errors import ExecutorError

START_SECONDS = 30.0  # how long the wrapper may take to start (and then to start the command)
HOLD_SECONDS = 30.0  # how long a wrapper waits for `go` before it gives up
ABANDONED = 125  # the wrapper's exit code when it gave up without starting the command

# The group leader of every run:
#   python -I -S -c WRAPPER <run dir> <report fd> <wake fd> <launcher pid> <hold s> <command...>
# It takes an flock on the run directory (held while it lives: evidence that any pid namespace
# can read), says b"h" on the report pipe and holds the command back until the file `go`
# appears in the run directory: the launcher creates it once the launch is pinned (its
# recovery metadata persisted) and then writes to the wake pipe. If the launcher dies first
# (its pid is no longer the parent, or the wake pipe reaches its end) or `hold` seconds pass,
# the wrapper creates `abandoned` and exits with code 125, having started nothing and written
# no `status`; it looks for `go` every 20 ms at most. Once let go it starts the command (argv,
# cwd, stdin, stdout and stderr unchanged; environment read back from /proc because Python
# coerces LC_CTYPE in its own), says b"ok" or the errno on the report pipe, waits, and writes
# the exit code (-N: signal N) to `status` atomically. It ignores SIGHUP, SIGINT and SIGTERM
# (the command gets them at their default) so that it outlives a command they stop.
WRAPPER = """\
import fcntl, os, select, signal, sys, time
run, hold, argv = sys.argv[1], float(sys.argv[5]), sys.argv[6:]
report, wake, launcher = (int(arg) for arg in sys.argv[2:5])
fcntl.flock(os.open(run, os.O_RDONLY), fcntl.LOCK_EX)  # held (not inherited) until it exits
for number in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
    if signal.getsignal(number) != signal.SIG_IGN:
        signal.signal(number, lambda *_: None)
try:
    with open("/proc/self/environ", "rb") as file:
        env = dict(item.split(b"=", 1) for item in file.read().split(b"\\0") if b"=" in item)
except OSError:
    env = os.environb
os.set_inheritable(report, False)
os.set_inheritable(wake, False)
def say(message):  # the launcher may be dead by now: a broken pipe must not stop us
    try:
        os.write(report, message)
    except OSError:
        pass
say(b"h")
go, waking, until = os.path.join(run, "go"), [wake], time.monotonic() + hold
while not os.path.exists(go):  # the command starts only once its launch is pinned
    if not waking or os.getppid() != launcher or time.monotonic() >= until:
        os.close(os.open(os.path.join(run, "abandoned"), os.O_WRONLY | os.O_CREAT, 0o600))
        sys.exit(125)  # decided after the last look for `go`: the command never starts
    if select.select(waking, [], [], 0.02)[0] and not os.read(wake, 64):
        waking = []  # end of file: the launcher died or gave up
os.close(wake)
try:
    pid = os.posix_spawnp(argv[0], argv, env, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
except Exception as error:
    say(str(getattr(error, "errno", 0) or 0).encode())
    sys.exit(127)
say(b"ok")
os.close(report)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
with open(os.path.join(run, "status.tmp"), "w") as file:
    file.write(f"{code}\\n")
os.replace(os.path.join(run, "status.tmp"), os.path.join(run, "status"))
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass
class Wrapper:
    """A wrapper that holds its run directory's lock and the command back until `release`."""

    directory: Path
    program: str
    proc: subprocess.Popen[bytes]
    report: int  # read end: b"h", then b"ok" or an errno
    wake: int  # write end: a byte after `go` was created; closing it tells "given up"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        """Let the command start (the launch is pinned): create `go` atomically, wake the
        wrapper and wait for its report; ExecutorError if the command did not start."""
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(self.directory / "go", create, 0o600))
        except OSError as error:
            raise ExecutorError(f"could not let {self.program!r} start: {error}") from None
        with contextlib.suppress(OSError):  # a wrapper that gave up no longer reads it
            os.write(self.wake, b"g")
        self.close_wake()
        answer = _read_report(self.report)
        if answer == b"ok":
            return
        code = int(answer) if answer.isdigit() else 0
        if code:
            reason = os.strerror(code)
        elif (self.directory / "abandoned").exists():
            reason = "the shell wrapper gave up waiting for the launch to be pinned"
        else:
            reason = "the shell wrapper did not start it"
        raise ExecutorError(f"could not start {self.program!r}: {reason}")

    def close_wake(self) -> None:
        if self.wake >= 0:
            os.close(self.wake)
            self.wake = -1

    def close(self) -> None:
        """Close both pipe ends (idempotent); a wrapper still holding back then gives up."""
        self.close_wake()
        if self.report >= 0:
            os.close(self.report)
            self.report = -1


def start_wrapper(
    directory: Path,
    command: list[str],
    cwd: str | None,
    env: dict[str, str],
    payload: bytes,
    hold: float = HOLD_SECONDS,
) -> Wrapper:
    """Write the input and start the wrapper in a new session; return once it holds the run
    directory's lock, with the command held back until `Wrapper.release`. ExecutorError (and
    nothing left running) if the wrapper did not start."""
    if not sys.executable:
        raise ExecutorError("no Python interpreter to run the shell wrapper")
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    report, writer = os.pipe()
    listener, wake = os.pipe()
    opened = [writer, listener]
    try:
        with open(os.open(directory / "input.json", create, 0o600), "wb") as file:
            file.write(payload)
        opened.append(os.open(directory / "input.json", os.O_RDONLY | os.O_CLOEXEC))
        opened += [os.open(directory / name, create, 0o600) for name in ("stdout", "stderr")]
        held = [str(directory), str(writer), str(listener), str(os.getpid()), str(float(hold))]
        argv = [sys.executable, "-I", "-S", "-c", WRAPPER, *held, *command]
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=opened[2], stdout=opened[3], stderr=opened[4],
            pass_fds=(writer, listener), start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        os.close(report)
        os.close(wake)
        reason = error.strerror or type(error).__name__
        raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
    finally:
        for fd in opened:
            os.close(fd)
    wrapper = Wrapper(directory, command[0], proc, report, wake)
    ready = select.select([report], [], [], START_SECONDS)[0]
    if ready and os.read(report, 1) == b"h":
        return wrapper
    wrapper.close()
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raise ExecutorError(f"could not start {command[0]!r}: the shell wrapper did not start")


def _read_report(fd: int) -> bytes:
    """What the wrapper says about starting the command: b"ok" or an errno (until EOF)."""
    answer, deadline = b"", time.monotonic() + START_SECONDS
    while len(answer) < 64 and select.select([fd], [], [], max(0, deadline - time.monotonic()))[0]:
        chunk = os.read(fd, 64)
        if not chunk:
            break
        answer += chunk
    return answer
