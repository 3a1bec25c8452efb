"""The wrapper that leads every shell run's process group: a fork of the launching process
(no interpreter is started), starting it in a run directory, and letting its command go
once the launch is pinned.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from rota.application.errors import ExecutorError

START_SECONDS = 30.0  # how long the wrapper may take to start (and then to start the command)
HOLD_SECONDS = 30.0  # how long a wrapper waits for `go` before it gives up
ABANDONED = 125  # the wrapper's exit code when it gave up without starting the command
HELD_SIGNALS = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGTERM})
# what the command gets at their default although Python (or the launcher) ignores them
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, *HELD_SIGNALS)

# The group leader of every run is a fork of the launching process, in a new session
# (`fork_wrapper`): forking costs a fraction of starting an interpreter, and the child only
# makes system calls (no lock another thread may hold, no store connection; every
# descriptor but its own is closed at once). It takes an flock on the run directory (held
# while it lives: evidence that any pid namespace can read), says b"h" on the report pipe
# and holds the command back until the file `go` appears in the run directory: the launcher
# creates it once the launch is pinned (its recovery metadata persisted) and then writes to
# the wake pipe. If the launcher dies first (its pid is no longer the parent, or the wake
# pipe reaches its end) or `hold` seconds pass, the wrapper creates `abandoned` and exits
# with code 125, having started nothing and written no `status`; it looks for `go` every
# 20 ms at most. Once let go it starts the command (posix_spawn: argv, cwd, environment,
# stdin, stdout and stderr as given, every signal at its default and none blocked), says
# b"ok" or the errno on the report pipe, waits, and writes the exit code (-N: signal N) to
# `status` atomically. It blocks SIGHUP, SIGINT and SIGTERM (the command gets them at their
# default) so that it outlives a command they stop.


def _child(
    run: str,
    report: int,
    wake: int,
    launcher: int,
    hold: float,
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    stdio: tuple[int, int, int],
) -> int:
    """The wrapper's life after the fork; returns its exit code (never raises)."""
    try:
        os.setsid()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        low = 3
        for fd in sorted({report, wake}):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
        lock = os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(lock, fcntl.LOCK_EX)  # held (not inherited) until it exits
        os.set_inheritable(report, False)
        os.set_inheritable(wake, False)
        if cwd is not None:
            try:
                os.chdir(cwd)
            except OSError as error:
                _say(report, b"e" + str(error.errno or 0).encode())
                return 127
        _say(report, b"h")
        go, waking = os.path.join(run, "go"), [wake]
        until = time.monotonic() + hold
        while not os.path.exists(go):  # the command starts only once its launch is pinned
            if not waking or os.getppid() != launcher or time.monotonic() >= until:
                os.close(os.open(os.path.join(run, "abandoned"), os.O_WRONLY | os.O_CREAT, 0o600))
                return ABANDONED  # decided after the last look for `go`: nothing starts
            if select.select(waking, [], [], 0.02)[0] and not os.read(wake, 64):
                waking = []  # end of file: the launcher died or gave up
        os.close(wake)
        try:
            pid = os.posix_spawnp(argv[0], argv, env, setsigdef=DEFAULT_SIGNALS, setsigmask=())
        except OSError as error:
            _say(report, str(error.errno or 0).encode())
            return 127
        _say(report, b"ok")
        os.close(report)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        temporary = os.path.join(run, "status.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, f"{code}\n".encode())
        os.close(fd)
        os.replace(temporary, os.path.join(run, "status"))
        return code if code >= 0 else 128 - code
    except BaseException:
        return 127


def _say(report: int, message: bytes) -> None:
    """The launcher may be dead by now: a broken pipe must not stop the wrapper."""
    with contextlib.suppress(OSError):
        os.write(report, message)


def fork_wrapper(
    run: Path,
    report: int,
    wake: int,
    hold: float,
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    stdio: tuple[int, int, int],
) -> int:
    """Fork the wrapper of `run` (see above); its pid. `report` is the write end the wrapper
    speaks on, `wake` the read end it waits on (both stay open here: the caller closes)."""
    launcher = os.getpid()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: "fork with threads"
        pid = os.fork()
    if pid == 0:  # the child: never returns into the launcher's code
        code = 127
        try:
            code = _child(str(run), report, wake, launcher, hold, argv, env, cwd, stdio)
        finally:
            os._exit(code)
    return pid


class Child:
    """The wrapper as this process sees it: its child, waited for through a pidfd."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._lock = threading.Lock()  # one reaper at a time: a pid is waited for once
        self._pidfd = -1
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        """Its exit code once it exited (reaping it), else None."""
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere: it exited, how is unknown
                    pid, status = self.pid, 255 << 8
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    self._close()
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to exit (`subprocess.TimeoutExpired` after `timeout` seconds)."""
        until = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            remaining = None if until is None else until - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            if self._pidfd >= 0:
                select.select([self._pidfd], [], [], remaining)
            else:
                time.sleep(min(0.01, remaining if remaining is not None else 0.01))
        assert self.returncode is not None
        return self.returncode

    def _close(self) -> None:
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = -1

    def __del__(self) -> None:
        self._close()


@dataclass
class Wrapper:
    """A wrapper that holds its run directory's lock and the command back until `release`."""

    directory: Path
    program: str
    proc: Child
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
    """Write the input and fork the wrapper in a new session; return once it holds the run
    directory's lock, with the command held back until `Wrapper.release`. ExecutorError (and
    nothing left running) if the wrapper did not start."""
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    report, writer = os.pipe()
    listener, wake = os.pipe()
    opened = [writer, listener]
    try:
        with open(os.open(directory / "input.json", create, 0o600), "wb") as file:
            file.write(payload)
        opened.append(os.open(directory / "input.json", os.O_RDONLY | os.O_CLOEXEC))
        opened += [os.open(directory / name, create, 0o600) for name in ("stdout", "stderr")]
        stdio = (opened[2], opened[3], opened[4])
        pid = fork_wrapper(directory, writer, listener, hold, command, env, cwd, stdio)
    except OSError as error:
        os.close(report)
        os.close(wake)
        reason = error.strerror or type(error).__name__
        raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
    finally:
        for fd in opened:
            os.close(fd)
    wrapper = Wrapper(directory, command[0], Child(pid), report, wake)
    ready = select.select([report], [], [], START_SECONDS)[0]
    first = os.read(report, 1) if ready else b""
    if first == b"h":
        return wrapper
    reason = "the shell wrapper did not start"
    if first == b"e":
        code = _read_report(report)
        reason = os.strerror(int(code)) if code.isdigit() else reason
    wrapper.close()
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    wrapper.proc.wait()
    raise ExecutorError(f"could not start {command[0]!r}: {reason}")


def _read_report(fd: int) -> bytes:
    """What the wrapper says about starting the command: b"ok" or an errno (until EOF)."""
    answer, deadline = b"", time.monotonic() + START_SECONDS
    while len(answer) < 64 and select.select([fd], [], [], max(0, deadline - time.monotonic()))[0]:
        chunk = os.read(fd, 64)
        if not chunk:
            break
        answer += chunk
    return answer
