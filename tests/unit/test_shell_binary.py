"""The installed wrapper: built by the install (never at run time), run only if it is fit to
run, and the program that leads every run when it is; without it the Python wrapper is forked.
`wrapper_kind` is the fixture the other shell tests use to run under both."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.infrastructure.executors import shell_binary, shell_spawner
from rota.infrastructure.executors.shell import ShellExecutor
from rota.infrastructure.executors.shell_binary import NAME, installed_wrapper, trusted

from .test_shell_executor import WAIT, gated, start

KINDS = ["native", "forked"]


def use_wrapper(kind: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Have new spawners start `kind` wrappers: the installed program's path, or None."""
    if kind == "forked":
        monkeypatch.setattr(shell_spawner, "installed_wrapper", lambda: None)
        return None
    native = installed_wrapper()
    if native is None:
        pytest.skip("no wrapper was installed (no C compiler at install time)")
    return native


@pytest.fixture(params=KINDS)
def wrapper_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    use_wrapper(request.param, monkeypatch)
    yield request.param


def exe_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/exe")


def installed_copy(directory: Path) -> Path:
    """A copy of a fit program (an executable of ours, writable by us alone) in `directory`."""
    directory.mkdir(mode=0o755, exist_ok=True)
    program = directory / NAME
    shutil.copy(sys.executable, program)
    program.chmod(0o755)
    return program


def compiler() -> str | None:
    """The C compiler an install would use (sysconfig's CC), if it is on this machine."""
    command = (sysconfig.get_config_var("CC") or "cc").split()
    return shutil.which(command[0]) if command else None


@pytest.mark.skipif(compiler() is None, reason="no C compiler: the install built no wrapper")
def test_with_a_compiler_the_install_put_the_wrapper_beside_the_spawner() -> None:
    native = installed_wrapper()
    assert native is not None, "the install built no wrapper: re-run the install (pip -v)"
    assert Path(native).parent == Path(shell_spawner.__file__).parent
    assert Path(native).name == "rota-wrapper"


def test_a_fit_program_is_trusted(tmp_path: Path) -> None:
    assert trusted(installed_copy(tmp_path / "pkg"))


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o644], ids=["group-w", "other-w", "not-x"])
def test_a_program_others_may_write_or_none_may_run_is_not(tmp_path: Path, mode: int) -> None:
    program = installed_copy(tmp_path / "pkg")
    program.chmod(mode)
    assert not trusted(program)


def test_a_program_in_a_directory_others_may_write_to_is_not(tmp_path: Path) -> None:
    program = installed_copy(tmp_path / "pkg")
    program.parent.chmod(0o777)
    assert not trusted(program)


def test_a_symbolic_link_or_a_directory_is_not(tmp_path: Path) -> None:
    program = installed_copy(tmp_path / "pkg")
    link = tmp_path / "pkg" / "link"
    link.symlink_to(program)
    assert not trusted(link)
    assert not trusted(tmp_path / "pkg")
    assert not trusted(tmp_path / "pkg" / "missing")


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_a_program_of_another_user_is_not(tmp_path: Path) -> None:
    program = installed_copy(tmp_path / "pkg")
    os.chown(program, 65534, -1)
    assert not trusted(program)
    os.chown(program, 0, -1)
    os.chown(program.parent, 65534, -1)
    assert not trusted(program)


def test_the_installed_wrapper_is_found_beside_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "pkg"
    monkeypatch.setattr(shell_binary, "HERE", directory)
    assert installed_wrapper() is None  # none there
    program = installed_copy(directory)
    assert installed_wrapper() == str(program)
    program.chmod(0o777)
    assert installed_wrapper() is None


@pytest.mark.parametrize("kind", KINDS)
def test_every_run_is_led_by_the_installed_wrapper_or_else_the_forked_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    native = use_wrapper(kind, monkeypatch)
    executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
    try:
        gate = tmp_path / "gate"
        run = start(executor, gated(gate, "exit 3"))
        expected = os.path.realpath(native or sys.executable)
        assert exe_of(run.pgid) == expected
        gate.touch()
        assert run.results.get(timeout=WAIT).error_code == "exit_3"
    finally:
        executor.close()


def test_a_wrapper_that_fails_to_start_falls_back_to_the_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path that cannot be run (removed since the spawner started): the run still goes."""
    monkeypatch.setattr(shell_spawner, "installed_wrapper", lambda: str(tmp_path / "gone"))
    executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
    try:
        gate = tmp_path / "gate"
        run = start(executor, gated(gate, "exit 4"))
        assert exe_of(run.pgid) == os.path.realpath(sys.executable)
        gate.touch()
        assert run.results.get(timeout=WAIT).error_code == "exit_4"
    finally:
        executor.close()
