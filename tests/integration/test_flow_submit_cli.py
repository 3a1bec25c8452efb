"""`rota submit --priority N --key K --cost N --throttle KEY:SECONDS`, as a user types it (a
real subprocess): the Work carries them, `rota work show` and `work list` show them, and a
bad value is one `invalid_flow` line (a JSON error object with `--json`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cli_process import refused, rota

CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done"]
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


def ok(home: Path, *args: str) -> str:
    done = rota(home, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def test_submit_records_the_flow_options_and_the_reads_show_them(home: Path) -> None:
    line = ok(
        home,
        "submit", "w", "--binding", "ok",
        "--priority", "5", "--key", "tenant:acme", "--key", "resource:db",
        "--cost", "2", "--throttle", "tenant:acme:60",
    )  # fmt: skip
    assert line.strip().endswith(
        "; flow: priority 5, keys tenant:acme, resource:db, cost 2, throttle tenant:acme every 60s"
    ), line
    view = json.loads(ok(home, "work", "show", "w", "--json"))
    assert {k: view[k] for k in ("priority", "keys", "cost", "throttle")} == {
        "priority": 5,
        "keys": ["tenant:acme", "resource:db"],
        "cost": 2,
        "throttle": {"key": "tenant:acme", "period": 60.0},
    }
    shown = ok(home, "work", "show", "w")
    assert "  flow: priority 5, keys tenant:acme, resource:db, cost 2, throttle" in shown
    (listed,) = json.loads(ok(home, "work", "list", "--json"))
    assert (listed["priority"], listed["keys"]) == (5, ["tenant:acme", "resource:db"])
    events = json.loads(ok(home, "events", "--json"))
    (data,) = [e["data"]["flow"] for e in events if e["type"] == "core.work.submitted"]
    assert (data["priority"], data["keys"], data["cost"]) == (5, ["tenant:acme", "resource:db"], 2)


def test_a_work_without_flow_options_shows_no_flow_line(home: Path) -> None:
    assert "flow" not in ok(home, "submit", "plain", "--binding", "ok")
    assert "flow:" not in ok(home, "work", "show", "plain")
    view = json.loads(ok(home, "work", "show", "plain", "--json"))
    assert (view["priority"], view["keys"], view["cost"], view["throttle"]) == (0, [], 1, None)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--priority", "high"], "--priority 'high' must be an integer"),
        (["--priority", "1001"], "priority 1001 must be an integer from -1000 to 1000"),
        (["--cost", "0"], "cost 0 must be an integer from 1 to 1000000"),
        (["--cost", "1.5"], "--cost '1.5' must be an integer"),
        (["--key", "bad key"], "key 'bad key' must match"),
        (["--key", "a", "--key", "a"], "name one key twice"),
        (["--throttle", "60"], "--throttle '60' must be KEY:SECONDS"),
        (["--throttle", "k:soon"], "--throttle 'k:soon' must be KEY:SECONDS"),
        (["--throttle", "k:0"], "throttle period 0.0 must be seconds"),
        (["--throttle", "k:nan"], "must be KEY:SECONDS"),
    ],
)
def test_a_bad_flow_option_is_one_invalid_flow_line(
    home: Path, options: list[str], says: str
) -> None:
    line = refused(rota(home, "submit", "w", "--binding", "ok", *options), "invalid_flow", 1)
    assert says in line, line


def test_a_bad_flow_option_with_json_is_a_json_error(home: Path) -> None:
    done = rota(home, "submit", "w", "--binding", "ok", "--priority", "x", "--json")
    assert done.returncode == 1
    error = json.loads(done.stderr)["error"]
    assert error["code"] == "invalid_flow"
    assert "--priority" in error["message"]
