"""Issue 15 item 6 end to end: input and results are JSON values, kept or refused, never
changed, through the command line and through `rota.open`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.domain.errors import RotaError

CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done"]
"""
TIMEOUT = 60


def _rota(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("ROTA_STORE", None)
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ('{"n": NaN}', "NaN is not a JSON number"),
        ("[1, Infinity]", "Infinity is not a JSON number"),
        ('{"xs": [0, {"big": 1e999}]}', "inf is not a finite JSON number"),
        ("-Infinity", "-Infinity is not a JSON number"),
    ],
)
def test_the_cli_refuses_a_number_json_cannot_hold(tmp_path: Path, given: str, said: str) -> None:
    """The command line refuses these while parsing --input (a usage error, exit 2);
    `check_payload` refuses the same values from Python callers (test_json_values unit)."""
    (tmp_path / "rota.toml").write_text(CONFIG)
    done = _rota(tmp_path, "submit", "w", "--binding", "ok", f"--input={given}")
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rota: usage: --input"), lines
    assert said in lines[0]
    assert "Traceback" not in done.stderr
    # Nothing was stored, so no `null` input shares its derived key with a real null.
    events = json.loads(_rota(tmp_path, "events", "--json").stdout or "[]")
    assert events == []
    real_null = _rota(tmp_path, "submit", "w", "--binding", "ok", "--input", "null")
    assert real_null.returncode == 0, real_null.stderr
    events = json.loads(_rota(tmp_path, "events", "--json").stdout)
    # (the Work's first input, carried by its definition)
    accepted = [e["data"]["input"] for e in events if e["type"] == "core.work.submitted"]
    assert [a["payload"] for a in accepted] == [None]


def _returns_a_set(ctx: rota.LaunchContext) -> Any:
    return {"seen", "twice"}


def test_a_callable_returning_a_set_fails_with_invalid_result() -> None:
    with rota.open("memory://", config={}) as scheduler:
        scheduler.register("sets", _returns_a_set)
        scheduler.submit("w", binding="sets", input={"n": 1})
        scheduler.run_until_idle(timeout=TIMEOUT)
        work = scheduler.work("w")
    assert work is not None and work.state != "completed", work
    last = work.attempts[-1]
    assert last.outcome == "failed" and last.error.code == "invalid_result", last
    assert "a set is not a JSON value" in last.error.message


def test_the_api_refuses_a_datetime_in_the_input_and_stores_nothing() -> None:
    with rota.open("memory://", config={}) as scheduler:
        scheduler.register("sets", _returns_a_set)
        with pytest.raises(RotaError) as refused:
            scheduler.submit("w", binding="sets", input=[0, 1, 2, {"when": datetime.now(UTC)}])
        assert refused.value.code == "not_json"
        assert str(refused.value).startswith("input payload[3].when: a datetime is not a JSON")
        assert scheduler.work("w") is None
