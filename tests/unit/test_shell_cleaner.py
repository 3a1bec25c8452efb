"""The shell executor's cleaner: `forget` hands a finished run's directory to one thread of
the executor's own, so the host calls it on its loop (`quick_forget`) without blocking."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from rota.infrastructure.executors.shell import ShellExecutor
from rota.infrastructure.executors.shell_runs import Cleaner

from .test_shell_executor import WAIT, start, wait_until


def test_tasks_run_in_order_on_one_thread_and_a_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cleaner = Cleaner()
    ran: list[tuple[int, str]] = []
    done = threading.Event()

    def task(n: int) -> None:
        ran.append((n, threading.current_thread().name))

    def failing() -> None:
        raise OSError("no such directory")

    with caplog.at_level(logging.WARNING, logger="rota.shell"):
        cleaner.put(lambda: task(1))
        cleaner.put(failing)
        cleaner.put(lambda: task(2))
        cleaner.put(done.set)
        assert done.wait(WAIT)
    assert ran == [(1, "rota-shell-cleaner"), (2, "rota-shell-cleaner")]
    assert "a shell run cleanup failed" in caplog.text
    cleaner.close(WAIT)
    cleaner.put(lambda: task(3))  # closed: at once, here
    assert ran[-1] == (3, threading.current_thread().name)


def test_forget_returns_at_once_and_the_cleaner_removes_the_run(tmp_path: Path) -> None:
    assert ShellExecutor.quick_forget  # the host calls it on its loop
    executor = ShellExecutor(tmp_path / "runs")
    try:
        run = start(executor, ["true"])
        assert run.result().outcome == "completed"
        directory = Path(run.persisted[0]["run"])
        busy, release = threading.Event(), threading.Event()
        executor._cleaner.put(lambda: (busy.set(), release.wait(WAIT)))
        assert busy.wait(WAIT)
        executor.forget("w-1/2", 7)  # does not wait for the busy cleaner
        assert directory.exists()
        release.set()
        wait_until(lambda: not directory.exists())
    finally:
        release.set()
        executor.close()
