"""`rota pause | resume | paused | priority` over a tmp rota.toml (in process, and the
refusals as a real subprocess): what the operator sees, what the log records, and that
`rota schedule pause` is unchanged beside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rota
from integration.cli_process import refused
from integration.cli_process import rota as run
from rota.cli import run as run_in_process

CONFIG = """\
[store]
url = "flow.db"

[[bindings]]
name = "ok"
executor = "shell"
command = ["true"]
"""


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG.replace("flow.db", str(tmp_path / "flow.db")))
    return tmp_path


@pytest.fixture
def ok(cwd: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """`rota --config C ARGS...` in process: its stdout, once it exited 0."""

    def call(cwd: Path, *args: str) -> str:
        capsys.readouterr()
        code = run_in_process(["--config", str(cwd / "rota.toml"), *args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    return call


def test_pause_list_resume_and_priority(cwd: Path, ok: Any) -> None:
    ok(cwd, "submit", "w", "--binding", "ok", "--input", "{}")
    assert ok(cwd, "paused") == "nothing is paused\n"
    said = ok(cwd, "pause", "pool", "jobs", "--reason", "db upgrade", "--by", "ada")
    assert said == "pool jobs: paused (db upgrade)\n"
    assert ok(cwd, "pause", "pool", "jobs") == "pool jobs: already paused\n"
    assert ok(cwd, "pause", "pool", "jobs", "--request-id", "r-0") == (
        "pool jobs: already paused\n"
    )
    ok(cwd, "pause", "key", "tenant:acme", "--request-id", "r-1")
    repeat = ok(cwd, "pause", "key", "tenant:acme", "--request-id", "r-1")
    assert "request r-1 was recorded at position" in repeat and "nothing new" in repeat
    listed = ok(cwd, "paused").splitlines()
    assert len(listed) == 2
    assert listed[0].startswith("key tenant:acme: paused since ")
    assert listed[1].startswith("pool jobs: paused since ") and "by ada (db upgrade)" in listed[1]
    shown = json.loads(ok(cwd, "paused", "--json"))
    assert [(p["target"], p["name"], p["reason"]) for p in shown] == [
        ("key", "tenant:acme", ""),
        ("pool", "jobs", "db upgrade"),
    ]
    assert ok(cwd, "priority", "w", "5", "--reason", "urgent") == "w: priority 5; ready\n"
    assert ok(cwd, "priority", "w", "5") == "w: priority is 5 already\n"
    answer = json.loads(ok(cwd, "priority", "w", "-3", "--json"))
    assert answer["request"]["type"] == "core.work.reprioritized" and answer["priority"] == -3
    assert answer["work"]["id"] == "w"
    assert ok(cwd, "resume", "pool", "jobs") == "pool jobs: resumed\n"
    resumed = json.loads(ok(cwd, "resume", "key", "tenant:acme", "--json"))
    assert resumed["paused"] == [] and resumed["request"]["type"] == "core.flow.resumed"
    with rota.open(cwd / "flow.db") as s:
        flow = [e for e in s.events() if e.stream == "flow/pauses"]
        assert [e.type for e in flow] == ["core.flow.paused"] * 2 + ["core.flow.resumed"] * 2
        assert flow[0].data["by"] == "ada"
        changes = [e.data for e in s.events() if e.type == "core.work.reprioritized"]
        assert [(c["priority"], c["previous"], c["reason"]) for c in changes] == [
            (5, 0, "urgent"),
            (-3, 5, ""),
        ]


def test_refusals_are_one_line_with_their_code(cwd: Path, ok: Any) -> None:
    ok(cwd, "submit", "w", "--binding", "ok")
    refused(run(cwd, "resume", "scope", "root"), "not_paused", 1)
    refused(run(cwd, "pause", "scope", "root//a"), "invalid_flow", 1)
    refused(run(cwd, "pause", "queue", "jobs"), "usage", 2)
    refused(run(cwd, "priority", "w", "5000"), "invalid_flow", 1)
    refused(run(cwd, "priority", "nope", "1"), "unknown_work", 1)


def test_schedule_pause_is_still_the_schedule_command(cwd: Path, ok: Any) -> None:
    with rota.open(cwd / "flow.db") as s:
        s.schedule("nightly", binding="ok", every="1h")
    assert "paused" in ok(cwd, "schedule", "pause", "nightly")
    assert ok(cwd, "paused") == "nothing is paused\n"
    ok(cwd, "schedule", "resume", "nightly")
