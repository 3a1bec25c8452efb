"""Nothing compiled at run time: a shell run starts no C compiler (nor any program but the
interpreter, for the spawner) from the scheduler, and runs no program it built itself (the
wrapper once was a C program compiled into the temporary directory): the spawner is this
Python interpreter, and the wrapper is either the program the install put beside the
spawner's module or, without one, this interpreter too (a fork of the spawner). Both ways
are checked. Where the environment itself lives (a virtualenv under /tmp) does not matter."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from rota.infrastructure.executors import shell_spawner
from rota.infrastructure.executors.shell import ShellExecutor

from .test_shell_binary import KINDS, use_wrapper
from .test_shell_executor import gated, start

COMPILERS = {"cc", "c89", "c99", "gcc", "clang", "tcc", "ld", "as", "cpp", "cc1", "collect2"}

_recorders: list[list[str]] = []  # the programs started while a test records them


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Every process this interpreter starts, by the program it runs (an audit hook cannot
    be removed: it records only while a test holds a recorder)."""
    if not _recorders:
        return
    program: Any = None
    if event == "subprocess.Popen":  # (executable, args, cwd, env)
        program = args[0] or (args[1][0] if isinstance(args[1], list | tuple) else args[1])
    elif event in ("os.posix_spawn", "os.exec"):  # (path, argv, env)
        program = args[0]
    elif event == "os.spawn":  # (mode, path, args, env)
        program = args[1]
    elif event == "os.system":  # (command,)
        program = shlex.split(os.fsdecode(args[0]))[0]
    if program is not None:
        for recorder in _recorders:
            recorder.append(os.fsdecode(program))


sys.addaudithook(_audit)


def exe_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/exe")


@pytest.mark.parametrize("kind", KINDS)
def test_a_shell_run_compiles_nothing_and_runs_only_the_interpreter_or_the_installed_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    interpreter = os.path.realpath(sys.executable)
    native = use_wrapper(kind, monkeypatch)
    module = os.path.dirname(os.path.realpath(shell_spawner.__file__))
    started: list[str] = []
    _recorders.append(started)
    try:
        executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
        try:
            gate = tmp_path / "gate"
            run = start(executor, gated(gate, "exit 3"))
            spawner = executor._spawner._proc
            assert spawner is not None
            # the spawner: the interpreter itself; the wrapper leading the run's group: the
            # program installed beside the spawner's module, or the interpreter
            assert exe_of(spawner.pid) == interpreter
            wrapper = exe_of(run.pgid)
            if native is None:
                assert wrapper == interpreter
            else:
                assert wrapper == os.path.realpath(native)
                assert os.path.dirname(os.path.realpath(native)) in (
                    module,
                    os.path.dirname(os.path.abspath(shell_spawner.__file__)),
                )
            gate.touch()
            assert run.result().error_code == "exit_3"
        finally:
            executor.close()
    finally:
        _recorders.remove(started)
    assert started, "the spawner's start was not seen: the audit hook saw nothing"
    allowed = {interpreter} | ({os.path.realpath(native)} if native is not None else set())
    for program in started:
        assert os.path.basename(program) not in COMPILERS, program
        assert os.path.realpath(program) in allowed, program
