"""`rota retention show | plan | run` and `rota audit verify` after a prune, as a user runs
them: plan's counts are run's, the archive is where the operator said, verify says how many
events were pruned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rota

from .cli_process import rota as run_rota

CONFIG = """
[store]
url = "rota.db"

[audit]
archive_dir = "archive"
checkpoint_dir = "checkpoints"

[[retention]]
name = "terminal-payloads"
keep_days = 0.000000001
scope = "root"
"""


def _ok(input: dict[str, Any]) -> Any:
    return {"echo": input, "padding": "z" * 5000}


def cli(cwd: Path, *args: str) -> str:
    done = run_rota(cwd, *args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_plan_run_show_and_verify(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(CONFIG)
    with rota.open(tmp_path / "rota.db", config={}) as scheduler:
        scheduler.register("ok", lambda ctx: _ok(ctx.trigger))
        for i in range(4):
            scheduler.submit(f"w{i}", binding="ok", input={"i": i})
        scheduler.run_until_idle(timeout=60)
    doctor = json.loads(cli(tmp_path, "doctor", "--json"))
    (overdue,) = [c for c in doctor["checks"] if c["name"] == "retention_overdue"]
    assert overdue["status"] == "ok"  # due, but not yet a day past due
    planned = json.loads(cli(tmp_path, "retention", "plan", "--json"))
    (policy,) = planned["policies"]
    assert policy["works"] == 4 and policy["events"] > 0 and policy["bytes_freed"] > 19000
    text = cli(tmp_path, "retention", "plan")
    assert f"policy terminal-payloads: 4 Works, {policy['events']} events" in text
    done = json.loads(cli(tmp_path, "retention", "run", "--json"))
    assert done["events"] == policy["events"]
    assert done["bytes_freed"] == policy["bytes_freed"]
    (name,) = done["archives"]
    assert (tmp_path / "archive" / name).is_file()
    assert list((tmp_path / "checkpoints").iterdir())
    shown = json.loads(cli(tmp_path, "retention", "show", "--json"))
    assert shown["prunes"] == 1 and shown["events_pruned"] == policy["events"]
    assert shown["bytes_pruned"] == policy["bytes_freed"]
    assert shown["policies_recorded"][0]["name"] == "terminal-payloads"
    assert "1 prune(s)" in cli(tmp_path, "retention", "show")
    verified = cli(tmp_path, "audit", "verify")
    assert verified.startswith("ok: ")
    assert f"{policy['events']} events pruned by 1 prune(s) (policy terminal-payloads)" in verified
    assert "nothing due" in cli(tmp_path, "retention", "run")
    doctor = json.loads(cli(tmp_path, "doctor", "--json"))
    assert doctor["ok"], doctor
    checks = {c["name"]: c for c in doctor["checks"]}
    assert "1 prune(s) recorded" in checks["retention_overdue"]["detail"]
    assert "events pruned by 1 prune(s)" in checks["hash_chain"]["detail"]


def test_doctor_warns_of_overdue_retention(tmp_path: Path) -> None:
    from datetime import timedelta

    from rota.domain.events import RetentionPolicy
    from rota.infrastructure.stores import open_store
    from rota.replay.retention_checks import check_retention

    with rota.open(tmp_path / "rota.db", config={}) as scheduler:
        scheduler.register("ok", lambda ctx: _ok(ctx.trigger))
        scheduler.submit("w0", binding="ok", input={"i": 0})
        scheduler.run_until_idle(timeout=60)
    policy = RetentionPolicy(name="p", keep_days=1)
    with open_store(str(tmp_path / "rota.db"), create=False) as store:
        now = store.now()
        assert check_retention(store, [policy], now).status == "ok"
        late = check_retention(store, [policy], now + timedelta(days=2, hours=1))
        assert late.status == "warn" and "policy p: 2 events of 1 Works" in late.detail
        assert check_retention(store, [], now).status == "ok"


def test_vacuum_enable_switches_an_old_file_to_incremental(tmp_path: Path) -> None:
    import apsw

    (tmp_path / "rota.toml").write_text(CONFIG)
    with rota.open(tmp_path / "rota.db", config={}) as scheduler:
        scheduler.register("ok", lambda ctx: _ok(ctx.trigger))
        scheduler.submit("w0", binding="ok", input={"i": 0})
        scheduler.run_until_idle(timeout=60)
    conn = apsw.Connection(str(tmp_path / "rota.db"))  # as a file made before rota set it
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()
    before = json.loads(cli(tmp_path, "retention", "vacuum", "--json"))
    assert before["vacuum"] == "none"
    assert "run with --enable" in cli(tmp_path, "retention", "vacuum")
    after = json.loads(cli(tmp_path, "retention", "vacuum", "--enable", "--json"))
    assert after["vacuum"] == "incremental"
    assert cli(tmp_path, "audit", "verify").startswith("ok: ")
