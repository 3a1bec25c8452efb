"""The wrapper that leads every shell run's process group: starting it in a run directory
(a fork of the spawner, `shell_spawner`: no interpreter per run, nothing compiled) and
letting its command go once the launch is pinned. What the wrapper does is described in
`shell_spawner`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from rota.application.errors import ExecutorError
from rota.infrastructure.executors.shell_spawner import Child, Spawner, readable

START_SECONDS = 30.0  # how long the wrapper may take to start (and then to start the command)
HOLD_SECONDS = 30.0  # how long a wrapper waits for `go` before it gives up
ABANDONED = 125  # the wrapper's exit code when it gave up without starting the command
# Inputs up to this many bytes reach the command through a pipe instead of a file: one
# page, what an empty pipe always takes in one write (PIPE_BUF) however small it is made.
PIPE_INPUT = 4096


@dataclass
class Wrapper:
    """A wrapper that holds its run directory's lock and the command back until `release`."""

    directory: Path
    program: str
    proc: Child
    report: socket.socket  # the wrapper's reports: b"h..." (read), then b"ok" or an errno
    wake: int  # write end: a byte after `go` was created; closing it tells "given up"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        """Let the command start (the launch is pinned) and wait for the wrapper's report;
        ExecutorError if the command did not start."""
        self.let_go()
        self.started()

    def let_go(self) -> None:
        """Create `go` atomically and wake the wrapper (its report is read by `started`)."""
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(os.path.join(self.directory, "go"), create, 0o600))
        except OSError as error:
            raise ExecutorError(f"could not let {self.program!r} start: {error}") from None
        with contextlib.suppress(OSError):  # a wrapper that gave up no longer reads it
            os.write(self.wake, b"g")
        self.close_wake()

    def started(self) -> None:
        """Wait for the wrapper's report after `let_go`; ExecutorError if the command did
        not start."""
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
        self.report.close()


@dataclass
class Spawned:
    """A wrapper asked of the spawner, whose first report (`held`) is still to be read."""

    directory: Path
    program: str
    report: socket.socket
    wake: int

    def held(self) -> Wrapper:
        """Wait for the wrapper to hold its run directory's lock, with the command held back
        until `Wrapper.release`; ExecutorError (nothing of the command started) if it did
        not start."""
        held = _held(self.report)
        if isinstance(held, Child):
            return Wrapper(self.directory, self.program, held, self.report, self.wake)
        # Nothing of the command started: a wrapper (or the spawner) that says b"e" exits
        # at once having started nothing, as does one that says nothing before its end
        # (EOF); one that said nothing in START_SECONDS sees the wake pipe close below and
        # gives up.
        os.close(self.wake)
        reason = "the shell wrapper did not start"
        if held.startswith(b"e"):
            reason = os.strerror(int(held[1:])) if held[1:].isdigit() else reason
            _until_closed(self.report)  # it exited
        self.report.close()
        raise ExecutorError(f"could not start {self.program!r}: {reason}")


def start_wrapper(
    spawner: Spawner,
    directory: Path,
    command: list[str],
    cwd: str | None,
    env: dict[str, str],
    payload: bytes,
    hold: float = HOLD_SECONDS,
) -> Wrapper:
    """Write the input and have `spawner` start the wrapper in a new session; return once it
    holds the run directory's lock, with the command held back until `Wrapper.release`.
    ExecutorError (and nothing of the command started) if the wrapper did not start."""
    return spawn_wrapper(spawner, directory, command, cwd, env, payload, hold).held()


def spawn_wrapper(
    spawner: Spawner,
    directory: Path,
    command: list[str],
    cwd: str | None,
    env: dict[str, str],
    payload: bytes,
    hold: float = HOLD_SECONDS,
) -> Spawned:
    """Write the input and ask `spawner` for the wrapper; returns without waiting for it
    (`Spawned.held` does), so that a batch of launches starts its wrappers side by side."""
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    report, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener, wake = os.pipe()
    opened = [writer.detach(), listener]
    run = str(directory)  # plain strings: a Path per file costs more than the rest here
    try:
        opened.append(_stdin(run, payload))
        opened += [os.open(f"{run}/{name}", create, 0o600) for name in ("stdout", "stderr")]
        fds = (opened[2], opened[3], opened[4], opened[0], listener)
        spawner.spawn(run, fds, hold, command, env, cwd)
    except (OSError, ExecutorError) as error:
        report.close()
        os.close(wake)
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
    finally:
        for fd in opened:
            os.close(fd)
    return Spawned(directory, command[0], report, wake)


def _stdin(run: str, payload: bytes) -> int:
    """The command's stdin: a pipe that already holds the whole input (its write end
    closed: the command reads it to its end whoever else lives), or for an input larger
    than PIPE_INPUT bytes the file `input.json` in the run directory."""
    if len(payload) <= PIPE_INPUT:
        reader, writer = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if os.write(writer, payload) == len(payload):  # never blocks: it fits at once
                os.set_blocking(reader, True)
                return reader
        except BlockingIOError:
            pass
        finally:
            os.close(writer)
        os.close(reader)
    # One descriptor written at its offsets (pwrite): its own offset stays at 0, so the
    # command reads its input from the start.
    create = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(f"{run}/input.json", create, 0o600)
    try:
        written = 0
        while written < len(payload):
            written += os.pwrite(fd, payload[written:], written)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _held(report: socket.socket) -> Child | bytes:
    """The wrapper's first report: b"h<pid> <start time>" (with its pidfd, where it could
    open one) as a Child; else what it said (b"" for nothing)."""
    if not readable(report.fileno(), START_SECONDS):
        return b""
    try:
        message, fds, _, _ = socket.recv_fds(report, 64, 1, socket.MSG_CMSG_CLOEXEC)
    except OSError:
        return b""
    pidfd = fds[0] if fds else None
    fields = message[1:].split() if message.startswith(b"h") else []
    if len(fields) == 2 and fields[0].isdigit() and fields[1].lstrip(b"-").isdigit():
        started = int(fields[1])
        return Child(int(fields[0]), pidfd, None if started < 0 else started)
    for fd in fds:
        os.close(fd)
    return message


def _read_report(report: socket.socket) -> bytes:
    """What the wrapper says next (one message: b"ok" or an errno); b"" if it said nothing
    in START_SECONDS or closed its end."""
    if not readable(report.fileno(), START_SECONDS):
        return b""
    try:
        return report.recv(64)
    except OSError:
        return b""


def _until_closed(report: socket.socket) -> None:
    """Wait (at most START_SECONDS) for the wrapper to close its end: it exited."""
    deadline = time.monotonic() + START_SECONDS
    while readable(report.fileno(), max(0.0, deadline - time.monotonic())):
        try:
            if not report.recv(64):
                return
        except OSError:
            return
