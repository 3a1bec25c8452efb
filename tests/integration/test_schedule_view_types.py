"""The schedules facade returns typed views whose JSON is the CLI's `--json` byte for byte,
with the keys of each Struct in their order (absent ones: UNSET, omitted)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

import rota


def _keys(struct: type[msgspec.Struct]) -> list[str]:
    return list(struct.__struct_fields__)


def _in_order(keys: list[str], struct: type[msgspec.Struct]) -> bool:
    fields = _keys(struct)
    return keys == [f for f in fields if f in keys] and set(keys) <= set(fields)


def test_schedule_views_encode_as_the_cli_json(tmp_path: Path) -> None:
    store = tmp_path / "cli.db"
    at = datetime(2020, 1, 1, tzinfo=UTC)
    with rota.open(store) as s:
        defined = s.schedule("nightly", binding="job", cron="30 2 * * *", timezone="Europe/Berlin")
        fired = s.schedules.trigger_now("nightly", key="k1")
        expected: dict[str, Any] = {
            "list": s.schedules.list(),
            "show": s.schedules.show("nightly"),
            "next": s.schedules.next("nightly", 3),
            "history": s.schedules.history("nightly"),
            "explain": s.schedules.explain("nightly", at),
        }
    assert isinstance(defined, rota.ScheduleView) and isinstance(fired, rota.TriggeredFire)
    assert isinstance(expected["show"].versions[0], rota.ScheduleVersion)
    assert isinstance(expected["next"][0], rota.UpcomingTime)
    assert isinstance(expected["history"][0], rota.HistoryEntry)
    assert isinstance(expected["explain"], rota.ScheduleExplanation)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "rota", "--store", str(store), *args, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    printed = {
        "list": cli("schedule", "list"),
        "show": cli("schedule", "show", "nightly"),
        "next": cli("schedule", "next", "nightly", "-n", "3"),
        "history": cli("schedule", "history", "nightly"),
        "explain": cli("explain", "schedule", "nightly", "--at", "2020-01-01T00:00Z"),
    }
    for what, view in expected.items():
        assert printed[what] == msgspec.json.encode(view).decode() + "\n", what
    shown = json.loads(printed["show"])
    healthy = [k for k in _keys(rota.ScheduleView) if k not in ("health", "health_reason")]
    assert list(shown) == healthy  # (health is left out while ok)
    assert list(shown["versions"][0]) == _keys(rota.ScheduleVersion)
    assert [list(v) for v in json.loads(printed["list"])] == [healthy[:-1]]
    assert [list(t) for t in json.loads(printed["next"])] == [_keys(rota.UpcomingTime)] * 3
    (entry,) = json.loads(printed["history"])
    assert entry["status"] == "fired" and entry["manual"] is True
    assert _in_order(list(entry), rota.HistoryEntry) and "outcome" in entry
    explained = json.loads(printed["explain"])
    assert explained["verdict"] == "before_definition"
    assert list(explained) == ["schedule", "at", "version", "verdict", "why"]
    assert _in_order(list(explained), rota.ScheduleExplanation)
    trig = json.loads(cli("schedule", "trigger", "nightly", "--key", "k2"))
    assert list(trig) == _keys(rota.TriggeredFire)
