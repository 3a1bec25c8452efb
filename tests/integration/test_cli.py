"""The `rota` command line, run as a real subprocess against a tmp rota.toml with shell bindings."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done $ROTA_WORK_ID"]

[[bindings]]
name = "boom"
executor = "shell"
command = ["sh", "-c", "echo broken >&2; exit 3"]
"""
WORK_KEYS = {"id", "state", "scope", "binding", "attempts", "retry", "waiting", "pending"}
ATTEMPT_KEYS = {"number", "epoch", "state", "outcome", "segments", "error", "data"}
EVENT_KEYS = {"position", "stream", "version", "type", "delivery_id", "recorded_at", "data"}
TIMEOUT = 60


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ROTA_STORE", None)
    return env


def rota(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def ok(cwd: Path, *args: str) -> str:
    done = rota(cwd, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def as_json(cwd: Path, *args: str) -> Any:
    return json.loads(ok(cwd, *args, "--json"))


def one_line_error(done: subprocess.CompletedProcess[str], code: str) -> str:
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"rota: {code}: "), lines[0]
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store where a good, a failing and an unrunnable Work were submitted and run."""
    home = tmp_path_factory.mktemp("ran")
    (home / "rota.toml").write_text(CONFIG)
    view = as_json(home, "submit", "good", "--binding", "ok", "--input", '{"n": 1}')
    assert view["state"] == "ready" and view["pending"][0]["key"].startswith("sha256:")
    ok(home, "submit", "bad", "--binding", "boom", "--scope", "root/ops")
    refused = rota(home, "submit", "ghost", "--binding", "nope")  # known nowhere yet
    assert "no binding 'nope'" in one_line_error(refused, "unknown_binding")
    _serve_elsewhere(home / "rota.db", "nope")
    ok(home, "submit", "ghost", "--binding", "nope")  # served by another process: it waits
    summary = as_json(home, "run", "--until-idle")  # returns although ghost stays ready
    assert summary["states"] == {"ready": 1, "retry_wait": 1, "completed": 1}
    return home


def _serve_elsewhere(store: Path, binding: str) -> None:
    """An embedded daemon that registers `binding` starts (recording that it serves it,
    `core.binding.served`) and stops before its first pass."""
    import threading

    import rota as rota_api

    with rota_api.open(store, config={}) as scheduler:
        scheduler.register(binding, lambda ctx: None)
        stopped = threading.Event()
        stopped.set()
        scheduler.run(stopped)


# -- submit, run, read -------------------------------------------------------------------


def test_work_show_json_contract(ran: Path) -> None:
    view = as_json(ran, "work", "show", "good")
    assert set(view) >= WORK_KEYS
    assert [view[key] for key in ("id", "state", "scope", "binding")] == [
        "good",
        "completed",
        "root",
        "ok",
    ]
    (attempt,) = view["attempts"]
    assert set(attempt) >= ATTEMPT_KEYS
    assert (attempt["number"], attempt["epoch"], attempt["state"]) == (1, 1, "ended")
    assert attempt["outcome"] == "completed" and attempt["error"] is None
    assert attempt["data"]["stdout_tail"] == "done good\n"
    (segment,) = attempt["segments"]
    assert segment["epoch"] == 1 and segment["invoke"] == "called"


def test_failing_job_waits_for_its_retry(ran: Path) -> None:
    view = as_json(ran, "work", "show", "bad")
    assert view["state"] == "retry_wait" and view["scope"] == "root/ops"
    (attempt,) = view["attempts"]
    assert attempt["outcome"] == "failed"
    assert attempt["error"]["code"] == "exit_3"
    assert view["retry"]["failures"] == 1 and view["retry"]["next_due"] is not None
    text = ok(ran, "work", "show", "bad")
    assert "exit_3" in text and "retry due" in text


def test_unknown_binding_stays_ready_and_says_why(ran: Path) -> None:
    view = as_json(ran, "work", "show", "ghost")
    assert view["state"] == "ready" and view["attempts"] == []
    assert view["waiting"]["code"] == "unknown_binding"


def test_work_list(ran: Path) -> None:
    works = as_json(ran, "work", "list")
    assert [(w["id"], w["state"], w["attempts"]) for w in works] == [
        ("bad", "retry_wait", 1),
        ("ghost", "ready", 0),
        ("good", "completed", 1),
    ]
    table = ok(ran, "work", "list")
    assert table.splitlines()[0].split()[:2] == ["WORK", "STATE"]
    assert "unknown_binding" in table and table.rstrip().endswith("1 completed")


def test_events_json_contract(ran: Path) -> None:
    events = as_json(ran, "events")
    assert events and all(set(e) == EVENT_KEYS for e in events)
    assert [e["position"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "core.work.submitted"
    assert events[0]["stream"] == "work/good" and events[0]["version"] == 1
    assert events[0]["data"]["binding"] == "ok"
    types = {e["type"] for e in events}
    assert {"core.execution.completed", "core.execution.failed", "core.retry.armed"} <= types
    after = as_json(ran, "events", "--after", "3")
    assert [e["position"] for e in after] == [e["position"] for e in events[3:]]
    assert ok(ran, "audit", "verify").startswith(f"ok: {len(events)} events")


def test_unknown_work_exits_1(ran: Path) -> None:
    done = rota(ran, "work", "show", "nobody")
    assert done.returncode == 1 and done.stdout == ""
    one_line_error(done, "unknown_work")
    as_json_error = rota(ran, "work", "show", "nobody", "--json")  # with --json: JSON
    assert as_json_error.returncode == 1 and as_json_error.stdout == ""
    (line,) = as_json_error.stderr.splitlines()
    assert json.loads(line)["error"]["code"] == "unknown_work"


# -- idempotency and refusals ------------------------------------------------------------


def test_submitting_the_same_work_twice_is_a_no_op(home: Path) -> None:
    first = ok(home, "submit", "w", "--binding", "ok", "--input", "[1, 2]", "--input-key", "k")
    assert first.startswith("w: submitted, ready")
    count = len(as_json(home, "events"))
    again = ok(home, "submit", "w", "--binding", "ok", "--input", "[1, 2]", "--input-key", "k")
    assert again.startswith("w: unchanged, ready")
    assert len(as_json(home, "events")) == count
    refused = rota(home, "submit", "w", "--binding", "boom")
    assert "already exists" in one_line_error(refused, "work_conflict")
    assert refused.returncode == 1
    assert len(as_json(home, "events")) == count


def test_invalid_input_json_is_a_usage_error(home: Path) -> None:
    done = rota(home, "submit", "w", "--binding", "ok", "--input", "{not json")
    assert done.returncode == 2
    assert "--input is not valid JSON" in one_line_error(done, "usage")
    assert not (home / "rota.db").exists()


def test_argparse_errors_are_one_line_and_exit_2(home: Path) -> None:
    for args in (("submit", "w"), ("work",), ("run", "--until-idle", "--timeout", "x")):
        done = rota(home, *args)
        assert done.returncode == 2
        one_line_error(done, "usage")


def test_config_errors_name_the_field_and_exit_2(home: Path) -> None:
    delays = ", ".join(["1"] * 101)
    (home / "rota.toml").write_text(CONFIG + f"[bindings.retry]\ndelays = [{delays}]\n")
    done = rota(home, "work", "list")
    assert done.returncode == 2
    line = one_line_error(done, "invalid_config")
    assert "bindings[1].retry.delays" in line
    (home / "bad.toml").write_text(CONFIG.replace('name = "ok"', "nmae = 1"))
    done = rota(home, "--config", "bad.toml", "events")
    assert done.returncode == 2 and "bindings[0].name" in one_line_error(done, "invalid_config")
    missing = rota(home, "--config", "missing.toml", "events")
    assert missing.returncode == 2 and "missing.toml" in one_line_error(missing, "invalid_config")


def test_first_binding_retry_delays_over_the_limit(tmp_path: Path) -> None:
    delays = ", ".join(["5"] * 101)
    (tmp_path / "rota.toml").write_text(
        f'[[bindings]]\nname = "x"\nexecutor = "shell"\ncommand = ["true"]\n'
        f"[bindings.retry]\ndelays = [{delays}]\n"
    )
    done = rota(tmp_path, "submit", "w", "--binding", "x")
    assert done.returncode == 2
    assert "bindings[0].retry.delays" in one_line_error(done, "invalid_config")


def test_a_shell_binding_the_shell_executor_refuses_fails_every_command(home: Path) -> None:
    broken = CONFIG.replace('command = ["sh", "-c", "echo broken >&2; exit 3"]', 'command = "x"')
    (home / "rota.toml").write_text(broken)
    done = rota(home, "work", "list")
    assert done.returncode == 2
    line = one_line_error(done, "invalid_config")
    assert "rota.toml: bindings[1].command: must be a list of strings, not a string" in line
    assert not (home / "rota.db").exists()


def test_run_and_submit_refuse_a_binding_on_an_executor_the_cli_does_not_have(
    home: Path,
) -> None:
    callable_binding = '[[bindings]]\nname = "py"\nexecutor = "greet"\n'
    (home / "rota.toml").write_text(CONFIG + callable_binding)
    for args in (("submit", "w", "--binding", "ok"), ("run", "--until-idle")):
        done = rota(home, *args)
        assert done.returncode == 1
        line = one_line_error(done, "unknown_executor")
        assert "rota.toml: bindings[2].executor: no executor 'greet' is registered" in line
    assert not (home / "rota.db").exists()  # refused before the store was opened
    one_line_error(rota(home, "work", "list"), "store_not_found")  # nor is a read
    assert not (home / "rota.db").exists()


def test_a_store_in_memory_is_refused_by_every_command_but_run(home: Path) -> None:
    """`memory://` lives only as long as the process that opens it: a submit would keep
    nothing and a read would find nothing another command wrote."""
    for args in (
        ("--store", "memory://", "submit", "a", "--binding", "ok"),
        ("--store", "memory://shared", "work", "list"),
        ("--store", "memory://shared", "audit", "verify"),
    ):
        done = rota(home, *args)
        assert done.returncode == 1
        line = one_line_error(done, "store_in_memory")
        assert "use memory:// from Python (rota.open) or with 'rota run'" in line
    env = {**_env(), "ROTA_STORE": "memory://"}
    one_line_error(rota(home, "submit", "b", "--binding", "ok", env=env), "store_in_memory")
    ok(home, "--store", "memory://", "run", "--until-idle")  # the daemon's process lives on
    shown = ok(home, "--store", "memory://x", "config", "show")  # shows it, opens nothing
    assert "memory://x" in shown
    assert not (home / "rota.db").exists()


def test_store_selection(home: Path) -> None:
    ok(home, "--store", "other.db", "submit", "a", "--binding", "ok")
    assert (home / "other.db").exists() and not (home / "rota.db").exists()
    env = {**_env(), "ROTA_STORE": "sqlite:///env.db"}
    done = rota(home, "submit", "b", "--binding", "ok", env=env)
    assert done.returncode == 0 and (home / "env.db").exists()
    listed = json.loads(rota(home, "work", "list", "--json", env=env).stdout)
    assert [w["id"] for w in listed] == ["b"]
    (home / "rota.toml").write_text('[store]\nurl = "sqlite:///configured.db"\n' + CONFIG)
    ok(home, "submit", "c", "--binding", "ok")
    assert (home / "configured.db").exists()
    (home / "rota.toml").unlink()  # a missing default config means the defaults
    done = rota(home, "submit", "d", "--binding", "ok")  # no config: 'ok' is known nowhere
    one_line_error(done, "unknown_binding")
    assert (home / "rota.db").exists()  # the defaults' store was the one opened


# -- the daemon --------------------------------------------------------------------------


@pytest.fixture
def daemon(home: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "run"],
        cwd=home,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            stream.close()


def test_run_runs_submitted_work_and_stops_on_sigterm(
    home: Path, daemon: subprocess.Popen[str]
) -> None:
    assert daemon.stdout is not None and daemon.stderr is not None
    opening: list[str] = []  # what it logged while opening the store (text lines)
    while not (line := daemon.stderr.readline()).startswith("rota: running"):
        assert line, f"the daemon exited before running: {opening}"
        opening.append(line)  # handlers are installed once "rota: running" is printed
    ok(home, "submit", "live", "--binding", "ok")
    deadline = time.monotonic() + TIMEOUT
    while as_json(home, "work", "show", "live")["state"] != "completed":
        assert time.monotonic() < deadline, "the daemon did not run the submitted Work"
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=15) == 0
    *logged, last = daemon.stderr.read().splitlines()
    assert last == "rota: stopped"
    # One decision line for each of the attempt's start and outcome (docs/operator.md, Logs).
    assert [line.split(" kind=")[0].split(maxsplit=2)[2] for line in logged] == [
        "attempt started",
        "attempt completed",
    ], logged
    assert daemon.stdout.read() == "1 Work: 1 completed\n"


# -- the demo ----------------------------------------------------------------------------


def test_the_demo_tells_the_truth_and_its_commands_work(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-P", "-m", "rota.demo"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "nightly-sync: retry_wait" in out and "exit_3" in out and "next_due" in out
    assert "verify_chain: ok" in out
    commands = [line.strip() for line in out.split("Next, from")[1].splitlines()[1:]]
    commands = [c for c in commands if "--config demo-data/rota.toml" in c]
    assert len(commands) >= 4
    for command in commands:
        ran = subprocess.run(
            shlex.split(command),
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert ran.returncode == 0, (command, ran.stderr)
    works = as_json(tmp_path, "--config", "demo-data/rota.toml", "work", "list")
    states = {w["id"]: w["state"] for w in works}
    assert states["nightly-sync"] == "retry_wait" and states["count-1"] == "completed"


def test_retry_command_reruns_a_failed_work_at_once(home: Path) -> None:
    ok(home, "submit", "broken", "--binding", "boom")
    ok(home, "run", "--until-idle")
    assert as_json(home, "work", "show", "broken")["state"] == "retry_wait"
    view = as_json(home, "retry", "broken", "--reason", "fixed the script")
    assert view["state"] == "ready" and view["retry"]["next_due"] is None
    ok(home, "run", "--until-idle")
    view = as_json(home, "work", "show", "broken")
    assert [a["number"] for a in view["attempts"]] == [1, 2]
    assert view["retry"]["failures"] == 1
    manual = [e for e in as_json(home, "events") if e["type"] == "core.manual.retry"]
    assert manual[0]["data"]["reason"] == "fixed the script"
    one_line_error(rota(home, "retry", "nobody"), "unknown_work")


def test_release_of_a_work_without_a_hold_is_refused(home: Path) -> None:
    ok(home, "submit", "fine", "--binding", "ok")
    one_line_error(rota(home, "release", "fine"), "not_held")


def test_capacity_json_and_cancel(home: Path) -> None:
    ok(home, "submit", "later", "--binding", "ok")
    view = as_json(home, "capacity")
    assert set(view) == {"pools", "scopes", "waiting", "preview", "keys", "buckets", "paused"}
    assert view["keys"] == {} and view["buckets"] == {} and view["paused"] == []
    assert view["pools"]["jobs"] == {"limit": 4, "in_use": 0, "waiting": 0, "preview": 0}
    assert view["pools"]["agents"]["limit"] == 4
    cancelled = as_json(home, "cancel", "later", "--reason", "not needed")
    assert cancelled["state"] == "cancelled"
    # Cancelling it again is what was asked for (issue 28, item 8): exit 0, no error.
    again = rota(home, "cancel", "later")
    assert again.returncode == 0 and again.stderr == ""
    assert again.stdout == "later: already cancelled (nothing recorded)\n"


def test_inject_and_interrupt_need_a_running_attempt(home: Path) -> None:
    ok(home, "submit", "idle-job", "--binding", "ok")
    one_line_error(rota(home, "inject", "idle-job", "--input", '"x"'), "no_live_attempt")
    one_line_error(rota(home, "interrupt", "idle-job"), "no_live_attempt")
    one_line_error(rota(home, "inject", "idle-job", "--input", "{bad"), "usage")
