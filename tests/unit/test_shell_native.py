"""The native wrapper: built once per directory, only in a directory that is ours, and the
program the spawner starts for every run when it could be built."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from rota.infrastructure.executors import shell_native, shell_spawner
from rota.infrastructure.executors.shell import ShellExecutor
from rota.infrastructure.executors.shell_runs import read_status
from rota.infrastructure.executors.shell_spawner import Child
from rota.infrastructure.executors.shell_wrapper import _held

from .test_shell_executor import WAIT, gated, start

needs_cc = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)


@needs_cc
def test_it_is_built_once_into_a_private_directory(tmp_path: Path) -> None:
    directory = tmp_path / "wrapper"
    program = shell_native._build(directory)
    assert program is not None and Path(program).parent == directory
    assert (directory.stat().st_mode & 0o777) == 0o700
    assert (os.stat(program).st_mode & 0o777) == 0o700
    assert os.listdir(directory) == [Path(program).name]  # no leftover sources
    before = os.stat(program).st_mtime_ns
    assert shell_native._build(directory) == program  # found, not built again
    assert os.stat(program).st_mtime_ns == before


def test_a_directory_others_may_write_to_is_never_used(tmp_path: Path) -> None:
    directory = tmp_path / "wrapper"
    directory.mkdir()
    directory.chmod(0o777)
    assert shell_native._build(directory) is None
    assert os.listdir(directory) == []


def test_a_program_others_may_write_is_never_run(tmp_path: Path) -> None:
    directory = tmp_path / "wrapper"
    directory.mkdir(mode=0o700)
    planted = directory / f"wrapper-{shell_native.DIGEST}"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o777)
    assert shell_native._build(directory) is None


def exe_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/exe")


@needs_cc
def test_every_run_is_led_by_the_native_wrapper(tmp_path: Path) -> None:
    native = shell_native.native_wrapper()
    assert native is not None
    executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
    try:
        gate = tmp_path / "gate"
        run = start(executor, gated(gate, "exit 3"))
        assert exe_of(run.pgid) == os.path.realpath(native)
        gate.touch()
        assert run.results.get(timeout=WAIT).error_code == "exit_3"
    finally:
        executor.close()


def test_without_it_the_python_wrapper_is_forked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shell_spawner, "native_wrapper", lambda: None)
    executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
    try:
        gate = tmp_path / "gate"
        run = start(executor, gated(gate, "exit 3"))
        assert exe_of(run.pgid) == os.path.realpath(sys.executable)
        gate.touch()
        assert run.results.get(timeout=WAIT).error_code == "exit_3"
    finally:
        executor.close()


@pytest.mark.parametrize("native", [True, False], ids=["native", "forked"])
def test_a_wrapper_whose_launcher_stopped_reading_still_records_the_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """The launcher died after `go` (its report pipe has no reader): saying b"ok" must not
    kill the wrapper (SIGPIPE), or the command's outcome would be lost to recovery."""
    if native and shell_native.native_wrapper() is None:
        pytest.skip("no native wrapper here")
    if not native:
        monkeypatch.setattr(shell_spawner, "native_wrapper", lambda: None)
    directory = tmp_path / "runs" / "w-1_2-e7-0123abcd"
    directory.mkdir(parents=True)
    report, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener, wake = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    spawner = shell_spawner.Spawner()
    try:
        env = {"PATH": os.environ.get("PATH", os.defpath)}
        fds = (null, null, null, writer.fileno(), listener)
        spawner.spawn(str(directory), fds, 30.0, ["true"], env, None)
        writer.close()
        for fd in (null, listener):
            os.close(fd)
        child = _held(report)
        assert isinstance(child, Child)
        report.close()  # nobody reads what it says next
        (directory / "go").touch()
        os.write(wake, b"g")
        child.wait(WAIT)
        assert read_status(directory) == 0
    finally:
        os.close(wake)
        spawner.close()
