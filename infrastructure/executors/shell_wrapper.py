"""The wrapper that leads every shell run's process group: starting it in a run directory
(started by the spawner, `shell_spawner`: no interpreter per run) and letting its command go
once the launch is pinned. What the wrapper does is described in `shell_spawner`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rota.application.errors import ExecutorError
from rota.infrastructure.executors.shell_spawner import Child, Spawner, readable

START_SECONDS = 30.0  # how long the wrapper may take to start (and then to start the command)
HOLD_SECONDS = 30.0  # how long a wrapper waits for `go` before it gives up
ABANDONED = 125  # the wrapper's exit code when it gave up without starting the command


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
            os.close(os.open(os.path.join(self.directory, "go"), create, 0o600))
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
    spawner: Spawner,
    directory: Path,
    command: list[str],
    cwd: str | None,
    env: dict[str, str],
    payload: bytes,
    hold: float = HOLD_SECONDS,
) -> Wrapper:
    """Write the input and have `spawner` fork the wrapper in a new session; return once it
    holds the run directory's lock, with the command held back until `Wrapper.release`.
    ExecutorError (and nothing left running) if the wrapper did not start."""
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    report, writer = os.pipe()
    listener, wake = os.pipe()
    opened = [writer, listener]
    run = str(directory)  # plain strings: a Path per file costs more than the rest here
    try:
        opened.append(os.open(f"{run}/input.json", create, 0o600))
        view = memoryview(payload)
        while view:
            view = view[os.write(opened[-1], view) :]
        os.close(opened.pop())
        opened.append(os.open(f"{run}/input.json", os.O_RDONLY | os.O_CLOEXEC))
        opened += [os.open(f"{run}/{name}", create, 0o600) for name in ("stdout", "stderr")]
        fds = (opened[2], opened[3], opened[4], writer, listener)
        child = spawner.spawn(run, fds, hold, command, env, cwd)
    except (OSError, ExecutorError) as error:
        os.close(report)
        os.close(wake)
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
    finally:
        for fd in opened:
            os.close(fd)
    pid = child.pid
    wrapper = Wrapper(directory, command[0], child, report, wake)
    first = os.read(report, 1) if readable(report, START_SECONDS) else b""
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
    while len(answer) < 64 and readable(fd, max(0.0, deadline - time.monotonic())):
        chunk = os.read(fd, 64)
        if not chunk:
            break
        answer += chunk
    return answer
