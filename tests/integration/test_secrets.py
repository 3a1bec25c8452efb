"""The secret canary: a value planted everywhere a user can put one is found nowhere rota writes.

Places a user can put a secret: a binding's `environment` table, the run-environment hook,
the store URL's password, the checkpoint signing key. Places rota writes: every event (the
raw store file or rows), an export, the doctor's output, log lines, error messages, command
output, checkpoints and the projection store.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from postgres import admin_execute, drop_schema, new_schema_name, require_postgres

import rota
from rota.application.secrets import secrets_digest, split_secrets
from rota.domain.policy import Binding
from rota.infrastructure.stores import redact_url

CANARY = "canary-7f3a9c51e0d2"  # the binding environment's value
HOOK_CANARY = "hookcanary-b81d44e9"  # the run-environment hook's value
PASSWORD = "pwcanary-2c9e7a13"  # the store URL's password (trust auth ignores it)


def _rota(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ROTA_STORE"}
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _everything_written(root: Path) -> bytes:
    """Every byte rota wrote under `root` (store, projections, checkpoints, exports)."""
    ours = ("rota.toml", "audit.key", "audit.key.pub")  # the user's own files
    files = (p for p in sorted(root.rglob("*")) if p.is_file() and p.name not in ours)
    return b"".join(p.read_bytes() for p in files)


def _key_material(key_file: Path) -> list[bytes]:
    """The private key's base64 body and its decoded bytes: neither may appear anywhere."""
    lines = key_file.read_text().splitlines()
    body = "".join(line for line in lines if line and not line.startswith("-----"))
    return [body.encode(), base64.b64decode(body)]


CONFIG = f"""\
[store]
url = "rota.db"

[audit]
checkpoint_dir = "checkpoints"
key = "audit.key"
every_events = 1

[[bindings]]
name = "echoes"
executor = "shell"
command = ["sh", "-c", "test ${{#API_TOKEN}} = {len(CANARY)} && echo token=$API_TOKEN"]
environment = {{ API_TOKEN = "{CANARY}" }}

[[bindings]]
name = "leaks"
executor = "shell"
command = ["sh", "-c", "echo failing with $API_TOKEN >&2; exit 3"]
environment = {{ API_TOKEN = "{CANARY}" }}
"""


def test_a_canary_in_the_config_reaches_the_job_and_nothing_rota_writes(tmp_path: Path) -> None:
    outputs: list[str] = []

    def run(*args: str, ok: bool = True) -> str:
        done = _rota(tmp_path, *args)
        outputs.extend([done.stdout, done.stderr])
        if ok:
            assert done.returncode == 0, done.stderr
        return done.stdout

    run("audit", "keygen", "--out", "audit.key")
    (tmp_path / "rota.toml").write_text(CONFIG)
    run("submit", "w-echo", "--binding", "echoes")
    run("submit", "w-leak", "--binding", "leaks")
    run("run", "--until-idle", "--timeout", "60")
    shown = run("work", "show", "w-echo", "--json")
    run("work", "show", "w-leak", "--json")
    # The job saw the value: its test passed and it completed.
    assert msgspec.json.decode(shown)["state"] == "completed"
    run("events", "--json")
    run("export", "--out", "export.jsonl")
    run("doctor", "--json", ok=False)  # whatever the verdict: its text is what is checked
    run("replay", "verify")
    run("audit", "checkpoint", "--dir", "checkpoints", "--key", "audit.key")
    run("audit", "verify", "--checkpoints", "checkpoints")
    run("work", "list", "--json")

    written = _everything_written(tmp_path / "checkpoints") + b"".join(
        (tmp_path / name).read_bytes()
        for name in ("rota.db", "rota.db.projections", "export.jsonl")
        if (tmp_path / name).exists()
    )
    assert (tmp_path / "export.jsonl").stat().st_size > 0
    assert list((tmp_path / "checkpoints").iterdir())
    shown_text = "".join(outputs)
    assert CANARY not in shown_text
    assert CANARY.encode() not in written
    for material in _key_material(tmp_path / "audit.key"):
        assert material not in written
        assert material not in shown_text.encode()


def test_a_canary_in_the_api_hook_and_binding_reaches_the_executor_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, str]] = []

    def environment(work: object, attempt: object) -> dict[str, str]:
        return {"HOOK_TOKEN": HOOK_CANARY}

    def job(ctx: rota.LaunchContext) -> str:
        seen.append((ctx.env["API_TOKEN"], ctx.env["HOOK_TOKEN"]))
        raise RuntimeError(f"failing with {ctx.env['API_TOKEN']} {ctx.env['HOOK_TOKEN']}")

    caplog.set_level(logging.DEBUG)
    with rota.open(tmp_path / "api.db", environment=environment) as scheduler:
        scheduler.register("job", job, config={"environment": {"API_TOKEN": CANARY}})
        scheduler.submit("w", binding="job")
        scheduler.run_until_idle(timeout=30)
        view = scheduler.work("w")
        events = msgspec.json.encode(scheduler.events(limit=10_000))
    assert seen and seen[0] == (CANARY, HOOK_CANARY)
    assert view is not None and view.attempts[0].outcome == "failed"
    written = _everything_written(tmp_path)
    for value in (CANARY, HOOK_CANARY):
        assert value.encode() not in written
        assert value.encode() not in events
        assert value not in msgspec.json.encode(view).decode()
        assert all(value not in record.getMessage() for record in caplog.records)


def test_the_pinned_binding_keeps_only_a_digest_and_it_changes_with_the_values() -> None:
    with rota.open("memory://") as scheduler:
        scheduler.register("job", lambda ctx: "ok", config={"environment": {"K": CANARY}})
        scheduler.submit("w1", binding="job")
        scheduler.run_until_idle(timeout=30)
        scheduler.bind("job", executor="job", config={"environment": {"K": CANARY + "x"}})
        scheduler.submit("w2", binding="job")
        scheduler.run_until_idle(timeout=30)
        pinned = [
            e.data["pinned"]["binding"]
            for e in scheduler.events(limit=10_000)
            if e.type == "core.execution.claimed"
        ]
    assert [b["config"] for b in pinned] == [{}, {}]
    first, second = (b["secrets_digest"] for b in pinned)
    assert first == secrets_digest({"K": CANARY})
    assert second == secrets_digest({"K": CANARY + "x"})
    assert first != second


def test_a_malformed_environment_is_refused_without_showing_its_value(tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text(
        '[[bindings]]\nname = "b"\nexecutor = "shell"\ncommand = ["true"]\n'
        f'environment = {{ TOKEN = ["{CANARY}"] }}\n'
    )
    done = _rota(tmp_path, "submit", "w", "--binding", "b")
    assert done.returncode == 2, done.stderr
    assert "rota: invalid_config:" in done.stderr
    assert "bindings[0].environment.TOKEN" in done.stderr  # its path in the file
    assert CANARY not in done.stderr + done.stdout
    assert not (tmp_path / "rota.db").exists() or CANARY.encode() not in _everything_written(
        tmp_path
    )


def test_split_secrets_leaves_a_binding_without_environment_alone() -> None:
    plain = Binding(name="b", executor="shell", config={"command": ["true"]})
    assert split_secrets(plain) == (plain, {})
    pinnable, secrets = split_secrets(
        Binding(name="b", executor="shell", config={"command": ["true"], "environment": {}})
    )
    assert (pinnable.config, pinnable.secrets_digest, secrets) == ({"command": ["true"]}, None, {})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/test", "postgresql://postgres:***@"),
        (f"postgresql://u@h/db?password={PASSWORD}&schema=s", "password=***&schema=s"),
        ("postgresql://postgres@127.0.0.1/test", "postgresql://postgres@127.0.0.1/test"),
        ("sqlite:////var/lib/rota.db", "sqlite:////var/lib/rota.db"),
    ],
)
def test_redact_url_masks_passwords_only(url: str, shown: str) -> None:
    assert shown in redact_url(url)
    assert PASSWORD not in redact_url(url)


@pytest.mark.postgres
def test_a_store_url_password_reaches_no_output_or_row(tmp_path: Path) -> None:
    base = require_postgres()
    schema = new_schema_name()
    assert "@" in base and "://" in base
    scheme, rest = base.split("://", 1)
    user, host = rest.split("@", 1)
    url = f"{scheme}://{user}:{PASSWORD}@{host}{'&' if '?' in host else '?'}schema={schema}"
    (tmp_path / "rota.toml").write_text(
        f'[store]\nurl = "{url}"\n\n[[bindings]]\nname = "ok"\nexecutor = "shell"\n'
        'command = ["true"]\n'
    )
    outputs: list[str] = []
    try:
        for args in (
            ("submit", "w", "--binding", "ok"),
            ("run", "--until-idle", "--timeout", "60"),
            ("events", "--json"),
            ("export", "--out", "export.jsonl"),
            ("doctor", "--json"),
            ("import", "export.jsonl", "--to", url),  # refused: the target is not empty
            ("import", "export.jsonl", "--to", url, "--json"),
            ("submit", "w", "--binding", "missing"),  # an error naming the binding
        ):
            done = _rota(tmp_path, *args)
            outputs.extend([done.stdout, done.stderr])
        assert "already holds" in "".join(outputs)  # the refusal that names the store
        assert PASSWORD not in "".join(outputs)
        assert PASSWORD.encode() not in _everything_written(tmp_path)
        rows = admin_execute(f'SELECT data::text FROM "{schema}".events')
        assert rows and all(PASSWORD not in str(row) for row in rows)
    finally:
        drop_schema(schema)
