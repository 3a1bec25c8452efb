"""`rota schedule ...` and `rota explain schedule` as real subprocesses, `[[schedules]]` in
rota.toml, and the looking views (next with DST and jitter flags, history, explain)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET

import rota
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import Config, ConfigError

CONFIG = """\
[store]
url = "sqlite:///rota.db"

[[bindings]]
name = "ok"
executor = "shell"
command = ["true"]

[[schedules]]
name = "nightly"
binding = "ok"
cron = "30 2 * * *"
timezone = "America/New_York"
input = { kind = "full" }

[[schedules]]
name = "poll"
binding = "ok"
every = "15m"
offset = "5m"
jitter = "30s"
overlap = "buffer_one"
"""


def rota_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def as_json(cwd: Path, *args: str) -> Any:
    done = rota_cli(cwd, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


def test_apply_list_show_change_trigger_and_history(home: Path) -> None:
    applied = as_json(home, "schedule", "apply")
    assert applied["versions"] == {"nightly": 1, "poll": 1} and applied["written"] == 2
    assert as_json(home, "schedule", "apply")["written"] == 0  # unchanged: nothing written
    listed = as_json(home, "schedule", "list")
    assert [(s["name"], s["state"], s["spec"]) for s in listed] == [
        ("nightly", "active", "30 2 * * *"),
        ("poll", "active", "every 15m+5m"),
    ]
    assert len(as_json(home, "schedule", "next", "poll", "-n", "3")) == 3
    paused = as_json(home, "schedule", "pause", "nightly", "--reason", "maintenance")
    assert paused["state"] == "paused"
    assert as_json(home, "schedule", "resume", "nightly")["state"] == "active"
    fired = as_json(home, "schedule", "trigger", "nightly", "--key", "now-1")
    assert fired["identity"] == "schedule/nightly/manual/now-1"
    (entry,) = as_json(home, "schedule", "history", "nightly")
    assert entry["status"] == "fired" and entry["manual"] and entry["work"] == "schedule.nightly@ok"
    shown = as_json(home, "schedule", "show", "nightly")
    assert [v["actor"] for v in shown["versions"]] == ["config"]
    explained = as_json(home, "explain", "schedule", "nightly", "--at", "2020-01-01T00:00Z")
    assert explained["verdict"] == "before_definition"
    text = rota_cli(home, "schedule", "list")
    assert text.returncode == 0 and "nightly: active" in text.stdout


def test_errors_are_one_line(home: Path) -> None:
    as_json(home, "schedule", "apply")
    done = rota_cli(home, "schedule", "show", "nope")
    assert done.returncode == 1 and done.stderr.strip().startswith("rota: unknown_schedule: ")
    (home / "rota.toml").write_text(CONFIG.replace('cron = "30 2 * * *"', 'cron = "30 2 * *"'))
    done = rota_cli(home, "schedule", "apply")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "schedules[0].cron" in done.stderr and "invalid_config" in done.stderr


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"every": "1m", "timezone": "Nowhere/Else"}, "timezone"),
        ({"cron": "0 0 ? * *"}, "cron"),
        ({"every": "1m", "jitter": "soon"}, "jitter"),
        ({"every": "1m", "offset": "5m"}, "offset"),
        ({"every": "1m", "catchup_window": -1}, "catchup_window"),
        ({"every": "1m", "input": {"x": float("nan")}}, "input"),
        ({}, "every"),
    ],
)
def test_config_refuses_bad_schedules(table: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Config.parse({"schedules": [{"name": "x", "binding": "b", **table}]})
    assert f"schedules[0].{field}" in str(refused.value)
    with pytest.raises(ConfigError, match="duplicate schedule name"):
        Config.parse({"schedules": [{"name": "x", "binding": "b", "every": "1m"}] * 2})
    # Every bad table is named in the one message, not only the first.
    good = {"name": "y", "binding": "b", "every": "1m"}
    with pytest.raises(ConfigError) as both:
        Config.parse({"schedules": [{"name": "x", "binding": "b", **table}, good, good]})
    assert f"schedules[0].{field}" in str(both.value)
    assert "schedules[2].name: duplicate schedule name 'y'" in str(both.value)


@pytest.fixture
def scheduler() -> Iterator[tuple[rota.Scheduler, ManualClock]]:
    clock = ManualClock(datetime(2026, 3, 7, 12, tzinfo=UTC))
    with rota.open("memory://", clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        yield s, clock


def test_next_flags_dst_and_jitter(scheduler: tuple[rota.Scheduler, ManualClock]) -> None:
    s, _ = scheduler
    s.schedule("nightly", binding="job", cron="30 2 * * *", timezone="America/New_York")
    s.schedule("jittered", binding="job", every="1h", jitter="10m")
    first, second = s.schedules.next("nightly", 2)
    assert (first.nominal, first.dst) == ("2026-03-08T07:00:00Z", "gap")
    assert first.local == "2026-03-08T03:00:00-04:00"
    assert (second.nominal, second.dst) == ("2026-03-09T06:30:00Z", None)
    upcoming = s.schedules.next("jittered", 5)
    assert all(0 <= t.jitter_seconds <= 600 for t in upcoming)
    assert upcoming == s.schedules.next("jittered", 5)  # deterministic


def test_explain_and_history_answer_why(scheduler: tuple[rota.Scheduler, ManualClock]) -> None:
    s, clock = scheduler
    s.schedule("tick", binding="job", every="1m")
    clock.advance(60)
    s.tick()  # 12:01 fires (latest), nothing before it
    s.host.schedule_runner.run()
    clock.advance(180)
    s.tick()  # 12:02, 12:03 coalesced; 12:04 overlaps the run still pending or running
    at = datetime(2026, 3, 7, 12, 1, tzinfo=UTC)
    fired = s.schedules.explain("tick", at)
    assert fired.verdict == "fired" and fired.work == "schedule.tick@job"
    coalesced = s.schedules.explain("tick", datetime(2026, 3, 7, 12, 2, 30, tzinfo=UTC))
    assert coalesced.verdict == "skipped" and coalesced.reason == "coalesced"
    assert coalesced.nominal == "2026-03-07T12:02:00Z" and coalesced.note is not UNSET
    later = s.schedules.explain("tick", datetime(2026, 3, 7, 13, tzinfo=UTC))
    assert later.verdict == "not_yet"
    entries = s.schedules.history("tick")
    assert [
        (e.nominal[11:16], e.status, (None if e.reason is UNSET else e.reason)) for e in entries
    ] == [
        ("12:01", "fired", None),
        ("12:02", "skipped", "coalesced"),
        ("12:03", "skipped", "coalesced"),
        ("12:04", "skipped", s.schedules.explain("tick", clock.now()).reason),
    ]
