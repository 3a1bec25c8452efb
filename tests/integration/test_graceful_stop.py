"""A graceful stop keeps jobs running (issue 15 item 1): SIGTERM on `rota run` releases
the leases and leaves the shell jobs' processes running; the next daemon adopts them, and
every job completes once, with no failure charged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

JOBS = 3
SCRIPT = (
    "echo started >> marks/$ROTA_WORK_ID && while [ ! -e release ]; do sleep 0.05; done"
    " && echo finished >> marks/$ROTA_WORK_ID"
)  # each job runs until the test creates `release`, and marks each step once
CONFIG = f"""\
[settings]
job_concurrency = {JOBS}

[[bindings]]
name = "job"
executor = "shell"
command = ["sh", "-c", "{SCRIPT}"]
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ROTA_STORE"}


def _cli(home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=home, env=_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _daemon(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "run", *args],
        cwd=home, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _works(home: Path) -> list[dict[str, Any]]:
    return list(json.loads(_cli(home, "work", "list", "--json")))


def _show(home: Path, work: str) -> dict[str, Any]:
    return dict(json.loads(_cli(home, "work", "show", work, "--json")))


def _until(home: Path, what: str, ok: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        works = _works(home)
        if ok(works):
            return works
        assert time.monotonic() < deadline, f"{what}: {works}"


def _marks(home: Path) -> dict[str, list[str]]:
    return {p.name: p.read_text().split() for p in sorted((home / "marks").iterdir())}


def test_sigterm_leaves_shell_jobs_running_and_the_next_daemon_adopts_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "rota.toml").write_text(CONFIG)
    (tmp_path / "marks").mkdir()
    for n in range(JOBS):
        _cli(tmp_path, "submit", f"job-{n}", "--binding", "job")
    first = _daemon(tmp_path)
    try:
        _until(tmp_path, "the jobs did not start", lambda ws: len(_marks(tmp_path)) == JOBS)
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    finally:
        if first.poll() is None:
            first.kill()
    assert first.stderr is not None and "rota: stopped" in first.stderr.read()
    # The jobs were not killed: each is still in its first run, and nothing failed.
    assert _marks(tmp_path) == {f"job-{n}": ["started"] for n in range(JOBS)}
    views = [_show(tmp_path, f"job-{n}") for n in range(JOBS)]
    assert all(a["outcome"] is None for w in views for a in w["attempts"]), views
    second = _daemon(tmp_path)
    try:
        (tmp_path / "release").touch()
        works = _until(
            tmp_path,
            "the next daemon did not finish the adopted jobs",
            lambda ws: [w["state"] for w in ws] == ["completed"] * JOBS,
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    assert _marks(tmp_path) == {f"job-{n}": ["started", "finished"] for n in range(JOBS)}
    assert len(works) == JOBS
    for n in range(JOBS):  # one attempt each, completed: no failure charged, no relaunch
        work = _show(tmp_path, f"job-{n}")
        assert [a["outcome"] for a in work["attempts"]] == ["completed"], work


def test_run_until_idle_releases_its_leases_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(CONFIG)
    (tmp_path / "marks").mkdir()
    _cli(tmp_path, "submit", "job-0", "--binding", "job")
    runner = _daemon(tmp_path, "--until-idle", "--timeout", "60")
    try:
        _until(tmp_path, "the job did not start", lambda ws: len(_marks(tmp_path)) == 1)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(30) == 0, runner.stderr.read() if runner.stderr else ""
    finally:
        if runner.poll() is None:
            runner.kill()
    events = json.loads(_cli(tmp_path, "events", "--json"))
    assert "core.execution.released" in [e["type"] for e in events]
    (tmp_path / "release").touch()
    _cli(tmp_path, "run", "--until-idle", "--timeout", "60")
    work = _show(tmp_path, "job-0")
    assert [a["outcome"] for a in work["attempts"]] == ["completed"]
    assert _marks(tmp_path) == {"job-0": ["started", "finished"]}


def test_drain_waits_for_running_jobs_before_stopping(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(CONFIG)
    (tmp_path / "marks").mkdir()
    _cli(tmp_path, "submit", "job-0", "--binding", "job")
    daemon = _daemon(tmp_path, "--drain", "30")
    try:
        _until(tmp_path, "the job did not start", lambda ws: len(_marks(tmp_path)) == 1)
        daemon.send_signal(signal.SIGTERM)
        (tmp_path / "release").touch()  # the job ends while the daemon drains
        assert daemon.wait(30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    (work,) = _works(tmp_path)
    assert work["state"] == "completed"  # finished before the daemon let go
