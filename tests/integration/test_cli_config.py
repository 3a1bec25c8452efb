"""`rota config validate`, `rota config show` (each value's source) and `$ROTA_CONFIG`
(issue 15, item 10), through the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CONFIG = """\
[store]
url = "postgresql://rota:hunter2-password@db.example/rota"

[settings]
concurrency = 2

[[bindings]]
name = "ok"
executor = "shell"
command = ["sh", "-c", "echo done"]
environment = { API_TOKEN = "s3cr3t-token-value" }
"""
SECRETS = ("hunter2-password", "s3cr3t-token-value")


def rota(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("ROTA_STORE", "ROTA_CONFIG")}
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def show(cwd: Path, *args: str, **env: str) -> dict[str, tuple[Any, str]]:
    done = rota(cwd, *args, "config", "show", "--json", **env)
    assert done.returncode == 0, done.stderr
    for secret in SECRETS:
        assert secret not in done.stdout
    return {row["key"]: (row["value"], row["source"]) for row in json.loads(done.stdout)}


def test_config_show_names_where_each_value_came_from(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(CONFIG)
    values = show(tmp_path)
    assert values["config"] == ("rota.toml", "default")
    assert values["settings.concurrency"] == (2, "file")
    assert values["settings.job_concurrency"] == (4, "default")
    assert values["bindings[0].command"] == (["sh", "-c", "echo done"], "file")
    assert values["bindings[0].retry.max_attempts"] == (3, "default")
    assert values["bindings[0].environment"] == ({"API_TOKEN": "<redacted>"}, "file")
    assert values["store.url"] == ("postgresql://rota:***@db.example/rota", "file")

    from_env = show(tmp_path, ROTA_STORE="sqlite:///env.db")
    assert from_env["store.url"] == ("sqlite:///env.db", "environment")
    from_flag = show(tmp_path, "--store", "sqlite:///flag.db", ROTA_STORE="sqlite:///env.db")
    assert from_flag["store.url"] == ("sqlite:///flag.db", "flag")

    text = rota(tmp_path, "config", "show")
    assert text.returncode == 0
    lines = {" ".join(line.split()) for line in text.stdout.splitlines()}
    assert "settings.concurrency = 2 (file)" in lines
    assert "settings.job_concurrency = 4 (default)" in lines
    assert not any(secret in text.stdout for secret in SECRETS)


def test_rota_config_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.toml").write_text(CONFIG.replace("concurrency = 2", "concurrency = 7"))
    (tmp_path / "rota.toml").write_text(CONFIG)
    values = show(tmp_path, ROTA_CONFIG="elsewhere.toml")
    assert values["config"] == ("elsewhere.toml", "environment")
    assert values["settings.concurrency"] == (7, "file")
    flag = show(tmp_path, "--config", "rota.toml", ROTA_CONFIG="elsewhere.toml")
    assert flag["config"] == ("rota.toml", "flag") and flag["settings.concurrency"] == (2, "file")
    missing = rota(tmp_path, "config", "show", ROTA_CONFIG="nope.toml")
    assert missing.returncode == 2
    assert missing.stderr.startswith("rota: invalid_config: config file nope.toml does not exist")


def test_config_validate(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(CONFIG)
    # --no-store: the file only (its PostgreSQL store is not there to compare schedules with)
    done = rota(tmp_path, "config", "validate", "--no-store")
    assert done.returncode == 0 and done.stdout.startswith("ok: rota.toml: 1 bindings"), done
    report = json.loads(rota(tmp_path, "config", "validate", "--no-store", "--json").stdout)
    assert report["ok"] is True and report["bindings"] == ["ok"]

    (tmp_path / "rota.toml").write_text(CONFIG.replace("concurrency = 2", "concurrency = -1"))
    bad = rota(tmp_path, "config", "validate")
    assert bad.returncode == 2 and bad.stdout == ""
    (line,) = bad.stderr.splitlines()
    assert line.startswith("rota: invalid_config: rota.toml: settings.concurrency: ")
    as_json = rota(tmp_path, "config", "validate", "--json")
    assert as_json.returncode == 2
    error = json.loads(as_json.stderr)["error"]
    assert error["code"] == "invalid_config" and "settings.concurrency" in error["message"]


APP_SCHEDULES = """\
[app]
module = "jobs:register"

[[schedules]]
name = "nightly"
binding = "from-python"
cron = "0 3 * * *"
"""


def test_with_an_app_a_schedules_python_binding_is_a_note_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(APP_SCHEDULES)
    done = rota(tmp_path, "config", "validate", "--no-store")
    assert done.returncode == 0, done.stderr
    assert "note: schedules[0].binding: no [[bindings]] table defines 'from-python'" in done.stdout
    assert "unless the app (jobs:register) registers it" in done.stdout
    (tmp_path / "rota.toml").write_text(APP_SCHEDULES.split("\n", 3)[3])  # without [app]
    refused = rota(tmp_path, "config", "validate", "--no-store")
    assert refused.returncode == 2 and "schedules[0].binding" in refused.stderr
