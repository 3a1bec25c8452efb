"""TestStartReadyHandsLaunchesOffTheLoop (seed 001): a stuck launch, run-environment hook,
adoption, stop check or control delivery never delays another Work's launch or the cadence.

The host used to run all of them on one pool of 8 threads: 8 launches that hang stalled
every later launch. Each task now has a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock

STUCK = 12  # more than the old pool's 8 threads


class StuckLaunch(rota.Executor):
    """An executor whose launch blocks until released (a container that never comes up)."""

    name = "stuck"
    pool = "agents"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.stop_entered = threading.Event()

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        self.entered.release()
        self.release.wait(60)
        done(rota.Result(data="late"))


@pytest.fixture
def scheduler() -> Iterator[rota.Scheduler]:
    clock = ManualClock(datetime(2026, 8, 1, 9, tzinfo=UTC))
    config = {"settings": {"concurrency": STUCK + 4}}
    with rota.open("memory://", clock=clock, config=config) as s:
        yield s


def test_stuck_launches_delay_neither_another_launch_nor_the_cadence(
    scheduler: rota.Scheduler,
) -> None:
    stuck = StuckLaunch()
    scheduler.register("stuck", executor=stuck)
    ran = threading.Event()
    scheduler.register("quick", lambda ctx: ran.set())
    for n in range(STUCK):
        scheduler.submit(f"stuck-{n}", binding="stuck")
    try:
        report = scheduler.tick()  # returns although every launch it handed off hangs
        assert report.started == STUCK
        for _ in range(STUCK):
            assert stuck.entered.acquire(timeout=10), "every stuck launch runs at once"
        scheduler.submit("quick", binding="quick")
        assert scheduler.tick().started == 1
        assert ran.wait(10), "the next Work launched while the others were stuck"
        assert scheduler.tick().coalesced is False  # the cadence goes on
    finally:
        stuck.release.set()
    scheduler.run_until_idle(timeout=30)
    states = {w.id: w.state for w in scheduler.works()}
    assert set(states.values()) == {"completed"}, states


def test_a_stuck_run_environment_hook_does_not_hold_up_other_launches() -> None:
    release = threading.Event()
    entered = threading.Semaphore(0)

    def environment(work: Any, attempt: Any) -> dict[str, str]:
        if work.work_id.startswith("stuck"):
            entered.release()
            release.wait(60)
        return {}

    ran = threading.Event()
    config = {"settings": {"concurrency": STUCK + 4}}
    with rota.open("memory://", config=config, environment=environment) as scheduler:
        scheduler.register("job", lambda ctx: ran.set() if ctx.work_id == "quick" else None)
        for n in range(STUCK):
            scheduler.submit(f"stuck-{n}", binding="job")
        try:
            scheduler.tick()
            for _ in range(STUCK):
                assert entered.acquire(timeout=10)
            scheduler.submit("quick", binding="job")
            scheduler.tick()
            assert ran.wait(10), "the quick Work's hook and launch waited behind stuck hooks"
        finally:
            release.set()
        scheduler.run_until_idle(timeout=30)


# -- TestDaemonJobConcurrency: `rota run` with shell jobs ----------------------------------

JOBS = 5
SCRIPT = (
    "mkdir running/$ROTA_WORK_ID && ls running | wc -l >> counts && sleep 0.4"
    " && rmdir running/$ROTA_WORK_ID"
)  # each job records how many run with it
JOB_CONFIG = f"""\
[settings]
concurrency = 1        # agent turns and pool-less executors: does not bound jobs
job_concurrency = 2    # the jobs pool (shell)

[[bindings]]
name = "job"
executor = "shell"
command = ["sh", "-c", "{SCRIPT}"]
"""


def test_the_daemon_runs_shell_jobs_up_to_job_concurrency_whatever_concurrency_says(
    tmp_path: Path,
) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "rota.toml").write_text(JOB_CONFIG)
    (tmp_path / "running").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ROTA_STORE"}

    def rota_cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "rota", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    for n in range(JOBS):
        rota_cli("submit", f"job-{n}", "--binding", "job")
    daemon = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "run"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            states = [w["state"] for w in json.loads(rota_cli("work", "list", "--json"))]
            if states == ["completed"] * JOBS:
                break
            assert time.monotonic() < deadline, f"the daemon did not finish the jobs: {states}"
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    counts = [int(line) for line in (tmp_path / "counts").read_text().split()]
    assert len(counts) == JOBS
    assert max(counts) == 2, counts  # two at once: concurrency = 1 did not bound them
