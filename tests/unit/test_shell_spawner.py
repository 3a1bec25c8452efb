"""The spawner's protocol: a launch sends its request and waits for nothing from the spawner;
the wrapper reports its own pid, start time and a pidfd of itself on the run's report
channel, and a spawner that could not start it says why there. Each test that runs a spawner
runs twice: with the installed C wrapper (posix_spawned) and with the forked Python one."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.application.errors import ExecutorError
from rota.infrastructure.executors.shell_processes import proc_stat
from rota.infrastructure.executors.shell_runs import read_status
from rota.infrastructure.executors.shell_spawner import Child, Spawner
from rota.infrastructure.executors.shell_wrapper import _held, start_wrapper

from .test_shell_binary import KINDS, use_wrapper
from .test_shell_executor import WAIT, children

ENV = {"PATH": os.environ.get("PATH", os.defpath)}


@pytest.fixture(params=KINDS)
def spawner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spawner]:
    use_wrapper(request.param, monkeypatch)
    spawner = Spawner()
    yield spawner
    spawner.close()


def send(spawner: Spawner, directory: Path) -> tuple[socket.socket, int]:
    """Request a wrapper for `directory` running `true`: its report channel and wake pipe."""
    report, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener, wake = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    try:
        fds = (null, null, null, writer.fileno(), listener)
        spawner.spawn(str(directory), fds, 30.0, ["true"], ENV, None)
    finally:
        writer.close()
        os.close(null)
        os.close(listener)
    return report, wake


def test_the_wrapper_reports_its_own_pid_start_time_and_pidfd(
    spawner: Spawner, tmp_path: Path
) -> None:
    directory = tmp_path / "w-1_2-e7-0123abcd"
    directory.mkdir()
    report, wake = send(spawner, directory)
    try:
        child = _held(report)
        assert isinstance(child, Child)
        assert spawner._proc is not None and children(spawner._proc.pid) == [child.pid]
        stat = proc_stat(child.pid)
        assert stat is not None and child.started == stat[2]  # field 22, read by itself
        pidfd = child.watch_fd()
        assert pidfd is not None  # its own pidfd, passed with the report
        os.close(pidfd)
        assert child.poll() is None  # it holds `true` back
        (directory / "go").touch()
        with contextlib.suppress(BrokenPipeError):  # it may have seen `go` and exited
            os.write(wake, b"g")
        assert report.recv(64) == b"ok"
        child.wait(WAIT)  # the pidfd becomes readable once it exited
        assert read_status(directory) == 0
    finally:
        report.close()
        os.close(wake)


def test_a_launch_does_not_wait_for_the_spawner_to_act_on_its_request(
    spawner: Spawner, tmp_path: Path
) -> None:
    """The request is sent and `spawn` returns: the wrapper, not the spawner, answers (a
    launch used to wait for the spawner's answer, one launch at a time)."""
    first, second = tmp_path / "w-1_2-e7-00000001", tmp_path / "w-1_2-e7-00000002"
    first.mkdir()
    second.mkdir()
    report, wake = send(spawner, first)  # the spawner runs
    assert isinstance(_held(report), Child)
    assert spawner._proc is not None
    os.kill(spawner._proc.pid, signal.SIGSTOP)
    try:
        sent: list[tuple[socket.socket, int]] = []
        thread = threading.Thread(target=lambda: sent.append(send(spawner, second)))
        thread.start()
        thread.join(WAIT)
        assert not thread.is_alive() and sent  # sent while the spawner cannot answer
    finally:
        os.kill(spawner._proc.pid, signal.SIGCONT)
    later, later_wake = sent[0]
    assert isinstance(_held(later), Child)  # it acted on it once it could
    for channel, pipe in ((report, wake), (later, later_wake)):
        channel.close()
        os.close(pipe)  # the wrappers give up: nothing started


class Refusing(Spawner):
    """A spawner that could not start the wrapper (e.g. fork failed): it says b"e" and the
    errno on the run's report channel, as the spawner process does."""

    def spawn(
        self,
        run: str,
        fds: tuple[int, int, int, int, int],
        hold: float,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
    ) -> None:
        os.write(fds[3], b"e11")  # EAGAIN


def test_a_spawner_that_could_not_start_the_wrapper_fails_the_launch_clearly(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "w-1_2-e7-0123abcd"
    directory.mkdir()
    with pytest.raises(ExecutorError) as raised:
        start_wrapper(Refusing(), directory, ["true"], None, ENV, b"[]")
    assert str(raised.value) == f"could not start 'true': {os.strerror(11)}"


def test_a_wrapper_whose_launcher_stopped_reading_still_records_the_status(
    spawner: Spawner, tmp_path: Path
) -> None:
    """The launcher died after `go` (its report channel has no reader): saying b"ok" must
    not kill the wrapper (SIGPIPE), or the command's outcome would be lost to recovery."""
    directory = tmp_path / "w-1_2-e7-0123abcd"
    directory.mkdir()
    report, wake = send(spawner, directory)
    try:
        child = _held(report)
        assert isinstance(child, Child)
        report.close()  # nobody reads what it says next
        (directory / "go").touch()
        # The wake byte only hurries it: having seen `go` itself (it looks every 20 ms), the
        # wrapper may have run `true` and exited already, its end of the pipe with it.
        with contextlib.suppress(BrokenPipeError):
            os.write(wake, b"g")
        child.wait(WAIT)
        assert read_status(directory) == 0
    finally:
        os.close(wake)
