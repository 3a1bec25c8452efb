"""The config is the truth for the schedules it defines (issue 28, item 2): a `[[schedules]]`
table removed from rota.toml is reported by `rota schedule apply`, `rota config validate`
and `rota run`, and removed by `rota schedule apply --prune` (`core.schedule.removed`,
actor `config`), also after an import into another store; schedules defined through the
API are never the config's. `rota config validate` checks the schedules, naming the field.
Real subprocesses (tests/integration/cli_process.py)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.application.ports import NewEvent
from rota.domain.events.schedule import ScheduleDefined
from rota.infrastructure.clock import ManualClock

from .cli_process import refused
from .cli_process import rota as run_rota

HEAD = """\
[store]
url = "sqlite:///rota.db"

[[bindings]]
name = "ok"
executor = "shell"
command = ["true"]
"""
TABLE = """
[[schedules]]
name = "{name}"
binding = "{binding}"
every = "1h"
timezone = "{zone}"
"""
LINE = (
    "schedule b is in the store but not in the config; run `rota schedule apply --prune` to "
    "remove it"
)


def config(*names: str, binding: str = "ok", zone: str = "UTC") -> str:
    return HEAD + "".join(TABLE.format(name=n, binding=binding, zone=zone) for n in names)


def cli(cwd: Path, *args: str) -> str:
    done = run_rota(cwd, *args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def cli_json(cwd: Path, *args: str) -> Any:
    return json.loads(cli(cwd, *args, "--json"))


def removals(cwd: Path) -> list[dict[str, Any]]:
    events = cli_json(cwd, "events")
    return [e["data"] for e in events if e["type"] == "core.schedule.removed"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(config("a", "b"))
    assert cli_json(tmp_path, "schedule", "apply")["versions"] == {"a": 1, "b": 1}
    (tmp_path / "rota.toml").write_text(config("a"))  # table b removed
    return tmp_path


def test_apply_validate_and_run_report_a_removed_table(home: Path) -> None:
    applied = cli_json(home, "schedule", "apply")
    assert applied["not_in_config"] == ["b"] and applied["pruned"] == []
    assert applied["written"] == 0
    assert LINE in cli(home, "schedule", "apply").splitlines()

    report = cli_json(home, "config", "validate")
    assert report["ok"] is True and report["not_in_config"] == ["b"]
    assert f"note: {LINE}" in cli(home, "config", "validate").splitlines()

    done = run_rota(home, "run", "--until-idle", "--timeout", "30", "--log-format", "json")
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in done.stderr.decode().splitlines()]
    (warning,) = [r for r in records if r.get("schedule") == "b"]
    assert warning["level"] == "warning" and warning["message"] == LINE
    # Reported, not removed: b is still there and nothing removed it.
    assert [s["name"] for s in cli_json(home, "schedule", "list")] == ["a", "b"]
    assert removals(home) == []


def test_prune_previews_then_records_removed_by_config(home: Path) -> None:
    before = len(cli_json(home, "events"))
    plan = cli_json(home, "schedule", "apply", "--prune", "--dry-run")
    assert plan == {"new": [], "changed": [], "unchanged": ["a"], "not_in_config": ["b"]}
    text = cli(home, "schedule", "apply", "--prune", "--dry-run").splitlines()
    assert "b: not in the config: would be removed" in text
    assert len(cli_json(home, "events")) == before  # a dry run writes nothing

    pruned = cli_json(home, "schedule", "apply", "--prune")
    assert pruned["pruned"] == ["b"] and pruned["not_in_config"] == [] and pruned["written"] == 1
    (removed,) = removals(home)
    assert removed["name"] == "b" and removed["actor"] == "config"
    assert "rota.toml" in removed["reason"]
    assert [s["name"] for s in cli_json(home, "schedule", "list")] == ["a"]
    again = cli_json(home, "schedule", "apply", "--prune")
    assert again["pruned"] == [] and again["written"] == 0
    assert cli_json(home, "config", "validate")["not_in_config"] == []


def test_api_schedules_are_not_the_configs(home: Path) -> None:
    with rota.open(str(home / "rota.db")) as scheduler:
        scheduler.schedule("manual", binding="ok", every="1h")
        # A config schedule the API redefines becomes the API's.
        scheduler.schedule("b", binding="ok", every="2h")
        assert scheduler.schedules.show("b").source == "api"
        assert scheduler.schedules.show("a").source == "config"
    applied = cli_json(home, "schedule", "apply", "--prune")
    assert applied["pruned"] == [] and applied["not_in_config"] == []
    names = [s["name"] for s in cli_json(home, "schedule", "list")]
    assert names == ["a", "b", "manual"] and removals(home) == []
    # The config defining it again takes it back (a new version), and can prune it later.
    (home / "rota.toml").write_text(config("a", "manual"))
    assert cli_json(home, "schedule", "apply")["versions"] == {"a": 1, "manual": 2}
    (home / "rota.toml").write_text(config("a"))
    assert cli_json(home, "schedule", "apply", "--prune")["pruned"] == ["manual"]


def test_after_an_import_into_another_store(home: Path) -> None:
    cli(home, "export", "--out", "log.jsonl")
    cli(home, "import", "log.jsonl", "--to", "sqlite:///moved.db")
    moved = ("--store", "sqlite:///moved.db")
    assert cli_json(home, *moved, "schedule", "apply")["not_in_config"] == ["b"]
    assert cli_json(home, *moved, "schedule", "apply", "--prune")["pruned"] == ["b"]
    assert [s["name"] for s in cli_json(home, *moved, "schedule", "list")] == ["a"]
    # The old store is untouched.
    assert [s["name"] for s in cli_json(home, "schedule", "list")] == ["a", "b"]


def test_prune_needs_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(config("a"))
    cli(tmp_path, "schedule", "apply")
    (tmp_path / "rota.toml").unlink()
    done = run_rota(tmp_path, "--store", "sqlite:///rota.db", "schedule", "apply", "--prune")
    line = refused(done, "no_config_file", 2)
    assert "--config FILE" in line
    assert [s["name"] for s in cli_json(tmp_path, "schedule", "list")] == ["a"]


def test_dry_run_on_a_store_not_made_yet(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(config("a", "b"))
    plan = cli_json(tmp_path, "schedule", "apply", "--dry-run")
    assert plan == {"new": ["a", "b"], "changed": [], "unchanged": [], "not_in_config": []}
    assert not (tmp_path / "rota.db").exists()
    (tmp_path / "rota.toml").write_text(config("a", "b").replace('"1h"', '"2h"', 1))
    cli(tmp_path, "schedule", "apply")
    (tmp_path / "rota.toml").write_text(config("a", "b"))
    assert cli_json(tmp_path, "schedule", "apply", "--dry-run")["changed"] == ["a"]


def test_validate_checks_the_schedules_and_counts_them(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(config("a", "b"))
    text = cli(tmp_path, "config", "validate").splitlines()
    assert text[0] == "ok: rota.toml: 1 bindings, 0 budgets, 2 schedules"
    assert cli_json(tmp_path, "config", "validate")["schedules"] == ["a", "b"]
    assert not (tmp_path / "rota.db").exists()  # validate creates no store

    b = TABLE.format(name="b", binding="ok", zone="UTC")
    cases = [
        (b.replace('"UTC"', '"Mars/Olympus"'), "timezone"),
        (b.replace('"ok"', '"nope"'), "binding"),
        (b.replace('every = "1h"', 'cron = "0 0 ? * *"'), "cron"),
    ]  # the other fields: test_schedule_cli.test_config_refuses_bad_schedules
    for table, field in cases:
        (tmp_path / "rota.toml").write_text(config("a") + table)
        line = refused(run_rota(tmp_path, "config", "validate"), "invalid_config", 2)
        assert f"rota.toml: schedules[1].{field}: " in line, line
    # A store it cannot read is a note (the file is valid); --no-store does not read it.
    (tmp_path / "rota.toml").write_text(config("a"))
    with sqlite3.connect(tmp_path / "other.db") as other:
        other.execute("create table mine (x)")
    note = cli_json(tmp_path, "--store", "sqlite:///other.db", "config", "validate")
    assert note["ok"] is True and note["store_not_read"].startswith("not_a_rota_store: ")
    skipped = cli_json(
        tmp_path, "--store", "sqlite:///other.db", "config", "validate", "--no-store"
    )
    assert "store_not_read" not in skipped
    # Every bad table is named, not only the first.
    (tmp_path / "rota.toml").write_text(config("a", "b", binding="nope"))
    line = refused(run_rota(tmp_path, "config", "validate"), "invalid_config", 2)
    assert "schedules[0].binding" in line and "schedules[1].binding" in line


def test_definitions_recorded_before_the_source_are_the_configs_by_actor() -> None:
    clock = ManualClock(datetime(2026, 3, 7, 12, tzinfo=UTC))
    with rota.open("memory://", clock=clock) as s:
        s.register("ok", lambda ctx: None)
        for name, actor in (("old-config", "config"), ("old-api", "api")):
            s.schedule(name, binding="ok", every="1h")
            row = s.service.schedules.row(name)
            fields = {f: getattr(row.definition, f) for f in row.definition.__struct_fields__}
            fields.update(schedule_version=2, actor=actor, source="")  # as an older rota wrote
            stream = f"schedule/{name}"
            expected = {stream: s.store.stream_version(stream)}
            s.store.append([NewEvent(stream, ScheduleDefined(**fields))], expected)
        assert s.schedules.show("old-config").source == "config"
        assert s.schedules.show("old-api").source == "api"
        assert s.schedules.not_in_config({}) == ["old-config"]
        head = s.store.head().position
        # Applying the same table writes nothing: the inferred source is already `config`.
        assert s.schedules.apply({"old-config": {"binding": "ok", "every": "1h"}}) == {
            "old-config": 2
        }
        assert s.store.head().position == head
        assert s.schedules.prune({}) == ["old-config"]
        assert [v.name for v in s.schedules.list()] == ["old-api"]
