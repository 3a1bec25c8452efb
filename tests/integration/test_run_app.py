"""`rota run --app MODULE:FUNCTION`: your Python jobs (sync and async callables) under the
daemon, with its signals, JSON logs and recovery; bad `--app` values; a submit to a binding
known nowhere refused at once; `rota.daemon.run` for an embedding program (issue 28, item 4).

Every daemon here is a real subprocess. The tests wait for conditions (a file the job
writes, an event in the log, a line on stderr), each polled with a deadline.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from rota import bootstrap

from .cli_process import cli_env, refused, rota

DEADLINE = 60.0

JOBS = '''\
import asyncio
import pathlib
import time

import rota

HERE = pathlib.Path(__file__).parent


def slow(ctx):
    """Says it started, then runs until the file `go` exists."""
    (HERE / f"started-{ctx.execution_id.replace('/', '-')}-{ctx.epoch}").write_text("")
    while not (HERE / "go").exists():
        time.sleep(0.01)
    return {"done": ctx.work_id}


async def double(ctx):
    await asyncio.sleep(0)
    return {"twice": ctx.trigger.get("n", 0) * 2}


def register(scheduler):
    lost = rota.RetryPolicy(retry_on_lost=True, delays=(0.5,))
    scheduler.register("slow", slow, retry=lost)
    scheduler.register("double", double)


async def async_register(scheduler):
    pass


NOT_A_FUNCTION = 42


def takes_nothing():
    pass


def raises(scheduler):
    raise ValueError("the secret token is hunter2")
'''


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(JOBS)
    (tmp_path / "broken.py").write_text("import os\nraise RuntimeError(os.environ['HOME'])\n")
    (tmp_path / "needs.py").write_text("import a_module_that_is_not_installed\n")
    return tmp_path


def _until(condition: Callable[[], object], what: str, process: Any = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the daemon exited before {what}: {process.communicate()}")
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE} s"
        time.sleep(0.02)  # polling the condition, with a deadline


def _daemon(home: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "--store", "s.db", "run", *args],
        cwd=home,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _events(home: Path) -> list[Any]:
    with bootstrap.open_log(home / "s.db", create=False) as store:
        return store.read(0, 100_000)


def _done(home: Path, work: str) -> bool:
    return any(
        e.type == "core.execution.completed" and e.stream == f"work/{work}" for e in _events(home)
    )


def _stop(process: subprocess.Popen[bytes]) -> tuple[str, str]:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, err
    return out.decode(), err.decode()


def test_a_sigterm_mid_job_then_the_next_run_recovers_it_and_it_completes(home: Path) -> None:
    done = rota(home, "--store", "s.db", "submit", "--app", "jobs:register", "b",
                "--binding", "slow", "--safety", "idempotent", "--input", "{}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = rota(home, "--store", "s.db", "submit", "--app", "jobs:register", "a",
                "--binding", "double", "--input", '{"n": 21}')  # fmt: skip
    assert done.returncode == 0, done.stderr

    first = _daemon(home, "--app", "jobs:register", "--log-format", "json")
    _until((home / "started-b-1-1").exists, "start of b's first attempt", first)
    _until(lambda: _done(home, "a"), "the async callable's result", first)
    _, err = _stop(first)  # SIGTERM while b's callable runs
    lines = [json.loads(line) for line in err.splitlines()]  # every stderr line is JSON
    assert lines[0]["message"] == "running" and lines[0]["bindings"] == 2
    assert lines[-1]["message"] == "stopped"
    released = [x for x in lines if x.get("event") == "core.execution.released"]
    assert [(x["work"], x["reason"]) for x in released] == [("b", "host_stopped")]
    assert not _done(home, "b")

    (home / "go").write_text("")
    second = _daemon(home, "--app", "jobs:register", "--log-format", "json")
    _until(lambda: _done(home, "b"), "b's completion after the restart", second)
    _stop(second)
    events = [e for e in _events(home) if e.stream == "work/b"]
    types = [e.type for e in events]
    # The second daemon recovered the released attempt (its callable died with the first
    # process: not running, so lost), retried it (the Work is idempotent) and it completed.
    assert "core.execution.recovered" in types and "core.execution.lost" in types
    completed = events[-1]
    assert completed.type == "core.execution.completed" and completed.event.attempt == 2
    result = [e for e in _events(home) if e.type == "core.execution.completed"]
    assert {e.stream: e.event.data for e in result} == {
        "work/a": {"twice": 42},
        "work/b": {"done": "b"},
    }


@pytest.mark.parametrize(
    ("spec", "code", "says"),
    [
        ("jobs", "app_invalid", "not 'package.module:function'"),
        ("jobs:register:again", "app_invalid", "one colon"),
        ("jobs.:register", "app_invalid", "dotted Python names"),
        ("nowhere:register", "app_not_found", "no module named 'nowhere'"),
        ("jobs:missing", "app_not_found", "has no attribute 'missing'"),
        ("jobs:NOT_A_FUNCTION", "app_not_callable", "is a int"),
        ("jobs:async_register", "app_not_callable", "not a plain function"),
        ("jobs:takes_nothing", "app_not_callable", "taking the scheduler"),
        ("broken:register", "app_failed", "importing broken failed: RuntimeError at"),
        ("needs:register", "app_failed", "importing needs failed: ModuleNotFoundError"),
        ("jobs:raises", "app_failed", "jobs:raises raised: ValueError at"),
    ],
)
def test_a_bad_app_is_one_line_with_a_code(home: Path, spec: str, code: str, says: str) -> None:
    done = rota(home, "--store", "s.db", "run", "--app", spec, "--until-idle")
    if "raised" in says:  # called once the store is open: the run's log lines come first
        err = done.stderr.decode()
        assert "Traceback" not in err and done.returncode == 1, err
        line = err.splitlines()[-1]
        assert line.startswith(f"rota: {code}: "), err
    else:
        line = refused(done, code, 1)
    assert says in line
    assert "hunter2" not in line and os.environ.get("HOME", "/nonexistent") not in line
    if "raised" not in says:  # found before the store is opened
        assert not (home / "s.db").exists()


def test_a_bad_app_module_in_the_config_names_its_field(home: Path) -> None:
    (home / "rota.toml").write_text('[app]\nmodule = "jobs"\n')
    done = rota(home, "--store", "s.db", "config", "validate")
    assert "app.module" in refused(done, "invalid_config", 2)


def test_the_config_app_is_loaded_by_run_and_submit(home: Path) -> None:
    (home / "rota.toml").write_text('[app]\nmodule = "jobs:register"\n')
    done = rota(
        home, "--store", "s.db", "submit", "w", "--binding", "double", "--input", '{"n": 2}'
    )
    assert done.returncode == 0, done.stderr
    done = rota(home, "--store", "s.db", "run", "--until-idle")
    assert done.returncode == 0, done.stderr
    assert "1 completed" in done.stdout.decode()


def test_a_submit_to_a_binding_known_nowhere_is_refused_at_once(home: Path) -> None:
    done = rota(home, "--store", "s.db", "submit", "w", "--binding", "double")
    line = refused(done, "unknown_binding", 1)
    assert "no binding 'double'" in line and "rota run --app" in line
    assert _events(home) == []  # nothing accepted
    # Once a daemon that serves it has run on the store, any process may submit to it.
    daemon = _daemon(home, "--app", "jobs:register")
    _until(lambda: any(e.type == "core.binding.served" for e in _events(home)), "served", daemon)
    _stop(daemon)
    served = {e.event.binding for e in _events(home) if e.type == "core.binding.served"}
    assert served == {"slow", "double"}
    done = rota(
        home, "--store", "s.db", "submit", "w", "--binding", "double", "--input", '{"n": 1}'
    )
    assert done.returncode == 0, done.stderr
    assert "waiting: unknown_binding" in done.stdout.decode()  # this process cannot run it


EMBEDDED = """\
import rota, rota.daemon

async def double(ctx):
    return {"twice": ctx.trigger["n"] * 2}

with rota.open("e.db", config={}) as scheduler:
    scheduler.register("double", double)
    scheduler.submit("w", binding="double", input={"n": 4})
    rota.daemon.run(scheduler, log_format="json")
"""


def _read_line(stream: IO[bytes], process: subprocess.Popen[bytes]) -> str:
    ready, _, _ = select.select([stream], [], [], DEADLINE)
    assert ready, f"no line within {DEADLINE} s"
    line = stream.readline()
    assert line, f"the program exited: {process.communicate()}"
    return line.decode()


def test_rota_daemon_run_logs_an_embedded_scheduler_as_rota_run_does(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(EMBEDDED)
    process = subprocess.Popen(
        [sys.executable, "-P", "app.py"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: list[dict[str, Any]] = []
    while not any(x.get("event") == "core.execution.completed" for x in lines):
        lines.append(json.loads(_read_line(process.stderr, process)))  # each one JSON
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, rest
    lines += [json.loads(line) for line in rest.decode().splitlines()]
    assert lines[0]["message"] == "running" and lines[-1]["message"] == "stopped"
    completed = next(x for x in lines if x.get("event") == "core.execution.completed")
    assert completed["logger"] == "rota.decisions" and completed["work"] == "w"


def test_rota_run_creates_a_store_whose_folder_does_not_exist(tmp_path: Path) -> None:
    store = tmp_path / "fresh" / "machine" / "rota.db"
    done = rota(tmp_path, "--store", f"sqlite:///{store}", "run", "--until-idle")
    assert done.returncode == 0, done.stderr  # was store_busy: no folder for its lock file
    assert store.is_file() and (store.parent / "rota.db.lock").is_file()
    verify = rota(tmp_path, "--store", f"sqlite:///{store}", "audit", "verify")
    assert verify.returncode == 0, verify.stderr
