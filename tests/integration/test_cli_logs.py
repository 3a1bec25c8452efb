"""`rota run`'s structured logs through the command line: with jobs that complete, fail
and retry, every decision the daemon appended is one JSON line on stderr with its fields,
exactly once, and neither an input payload nor an environment value reaches a line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CANARY = "envcanary-4b7d0e92"  # a binding's environment value
PAYLOAD_CANARY = "inputcanary-5c11a3f8"  # an input payload
CONFIG = f"""\
[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done"]
environment = {{ API_TOKEN = "{CANARY}" }}

[[bindings]]
name = "flaky"
executor = "shell"
command = ["sh", "-c", "test -e marker && exit 0; touch marker; echo $API_TOKEN >&2; exit 3"]
environment = {{ API_TOKEN = "{CANARY}" }}
[bindings.retry]
delays = [0]
max_attempts = 3

[[bindings]]
name = "broken"
executor = "shell"
command = ["sh", "-c", "echo $API_TOKEN; exit 4"]
environment = {{ API_TOKEN = "{CANARY}" }}
[bindings.retry]
max_attempts = 1
"""
IDENTIFYING = {"event", "work", "execution", "epoch", "position", "delivery_id"}


def rota(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")}
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd, env={**environ, **env}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    payload = json.dumps({"note": PAYLOAD_CANARY})
    for work, binding in (("a", "ok"), ("b", "flaky"), ("c", "broken")):
        done = rota(tmp_path, "submit", work, "--binding", binding, "--input", payload)
        assert done.returncode == 0, done.stderr
    return tmp_path


def json_lines(stderr: str) -> list[dict[str, Any]]:
    lines = stderr.splitlines()
    assert lines, "nothing was logged"
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_run_logs_each_decision_once_as_a_json_line(home: Path) -> None:
    done = rota(home, "run", "--until-idle", "--timeout", "60", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "3 Work: 2 completed, 1 failed\n"
    lines = json_lines(done.stderr)
    decisions = [line for line in lines if line["logger"] == "rota.decisions"]
    for line in decisions:
        assert set(line) >= IDENTIFYING and {"time", "level", "message", "kind"} <= set(line)
    said = [(d["message"], d["execution"]) for d in decisions]
    for execution in ("a/1", "b/1", "b/2", "c/1"):
        assert ("attempt started", execution) in said
    assert ("attempt completed", "a/1") in said and ("attempt completed", "b/2") in said
    failed = {d["execution"]: d for d in decisions if d["message"] == "attempt failed"}
    assert set(failed) == {"b/1", "c/1"}
    assert failed["c/1"]["level"] == "warning" and failed["c/1"]["error_code"] == "exit_4"
    assert failed["b/1"]["error_code"] == "exit_3" and failed["b/1"]["epoch"] == 1
    (armed,) = [d for d in decisions if d["message"] == "retry armed"]
    assert (armed["work"], armed["execution"], armed["generation"]) == ("b", "b/1", 1)
    (fired,) = [d for d in decisions if d["message"] == "retry fired"]
    assert fired["delivery_id"] == "retry/b/1"

    # Each line is an event of the log, at its position and type, and none is logged twice.
    events = json.loads(rota(home, "events", "--json").stdout)
    by_position = {e["position"]: e for e in events}
    positions = [d["position"] for d in decisions]
    assert len(positions) == len(set(positions))
    for d in decisions:
        event = by_position[d["position"]]
        assert (event["type"], event["delivery_id"]) == (d["event"], d["delivery_id"])
    # Every claim, outcome and retry timer this run appended has its line (INFO and above).
    logged_types = {"core.execution.claimed", "core.execution.completed",
                    "core.execution.failed", "core.retry.armed", "core.retry.fired"}  # fmt: skip
    expected = {e["position"] for e in events if e["type"] in logged_types}
    assert expected == {d["position"] for d in decisions if d["event"] in logged_types}
    assert CANARY not in done.stderr and PAYLOAD_CANARY not in done.stderr


def test_the_environment_chooses_the_format_and_level_and_the_flag_wins(home: Path) -> None:
    quiet = rota(home, "run", "--until-idle", ROTA_LOG_FORMAT="json", ROTA_LOG_LEVEL="warning")
    assert quiet.returncode == 0, quiet.stderr
    levels = {line["level"] for line in json_lines(quiet.stderr)}
    assert levels <= {"warning", "error"}
    assert {line["execution"] for line in json_lines(quiet.stderr)} >= {"b/1", "c/1"}
    (home / "marker").unlink()
    rota(home, "submit", "d", "--binding", "ok")
    text = rota(home, "run", "--until-idle", "--log-format", "text", ROTA_LOG_FORMAT="json")
    assert text.returncode == 0, text.stderr
    started = [line for line in text.stderr.splitlines() if " attempt started " in line]
    assert len(started) == 1 and "work=d execution=d/1 epoch=1 position=" in started[0]
    assert CANARY not in quiet.stderr + text.stderr


def test_a_bad_log_setting_is_a_usage_error_before_anything_runs(home: Path) -> None:
    done = rota(home, "run", "--until-idle", ROTA_LOG_LEVEL="chatty")
    assert done.returncode == 2
    assert done.stderr == (
        "rota: usage: $ROTA_LOG_LEVEL must be one of debug, info, warning, error, not 'chatty'\n"
    )
    shown = rota(home, "config", "show", "--json", ROTA_LOG_FORMAT="json")
    rows = {row["key"]: (row["value"], row["source"]) for row in json.loads(shown.stdout)}
    assert rows["log.format"] == ("json", "environment")
    assert rows["log.level"] == ("info", "default")
    states = json.loads(rota(home, "work", "list", "--json").stdout)
    assert {w["state"] for w in states} == {"ready"}  # nothing ran


JOB = "touch started; while [ ! -e release ]; do sleep 0.05; done"  # runs until released


def test_a_stopped_daemons_release_and_the_next_ones_adoption_are_lines(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(
        f'[[bindings]]\nname = "held"\nexecutor = "shell"\ncommand = ["sh", "-c", "{JOB}"]\n'
    )
    assert rota(tmp_path, "submit", "w", "--binding", "held").returncode == 0
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")}
    first = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "run", "--log-format", "json", "--log-level", "debug"],
        cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert first.stderr is not None
        seen: list[dict[str, Any]] = []
        # The shell executor persists its recovery metadata once the job's process runs.
        while not seen or seen[-1]["message"] != "recovery metadata persisted":
            line = first.stderr.readline()
            assert line, f"the daemon ended first: {seen}"
            seen.append(json.loads(line))
        assert any(line["message"] == "running" and line["kind"] == "daemon" for line in seen)
        first.send_signal(signal.SIGTERM)
        # Read while waiting: at debug level the stopping daemon may say more than a pipe
        # holds, and a daemon blocked on a full pipe never ends.
        _, said_after = first.communicate(timeout=30)
        assert first.returncode == 0
        rest = json_lines(said_after)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
        if first.stderr is not None:
            first.stderr.close()
    (released,) = [line for line in rest if line["message"] == "lease released"]
    assert (released["execution"], released["epoch"], released["reason"]) == (
        "w/1",
        1,
        "host_stopped",
    )
    assert {"logger": "rota.daemon", "message": "stopped"}.items() <= next(
        line for line in rest if line["message"] == "stopped"
    ).items()

    (tmp_path / "release").touch()
    second = rota(tmp_path, "run", "--until-idle", "--timeout", "60", "--log-format", "json")
    assert second.returncode == 0, second.stderr
    said = [
        (d["message"], d["kind"], d["execution"], d["epoch"]) for d in json_lines(second.stderr)
    ]
    assert said == [
        ("attempt recovered", "recovery", "w/1", 2),
        ("attempt adopted", "adoption", "w/1", 2),
        ("attempt completed", "outcome", "w/1", 2),
    ], said
