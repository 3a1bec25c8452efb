"""Stores are what they claim (issue 15, items 3 and 4), through the `rota` command.

Commands that only read refuse a store that does not exist (`store_not_found`) and create
nothing; only submit, run and import create one. An SQLite file of another program is
refused, never taken over; a store written by a newer rota is refused with both versions
named. Every command reads a store URL the same way (SQLAlchemy's convention).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from postgres import POSTGRES_URL, drop_schema, new_schema_name, require_postgres, schema_url

CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["true"]
"""
READS = [
    ("work", "list"),
    ("events",),
    ("audit", "verify"),
    ("replay", "verify"),
    ("export", "--out", "out.jsonl"),
]


def rota(cwd: Path, *args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    run = ["-c", code] if code else ["-m", "rota"]
    env = {k: v for k, v in os.environ.items() if k != "ROTA_STORE"}
    return subprocess.run(
        [sys.executable, "-P", *run, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(done: subprocess.CompletedProcess[str], code: str) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    assert lines[0].startswith(f"rota: {code}: "), lines[0]
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("form", ["path", "relative", "absolute"])
def test_a_read_on_a_missing_store_refuses_and_creates_nothing(
    home: Path, command: tuple[str, ...], form: str
) -> None:
    missing = f"missing-{home.name}"  # unique: nor may its old meaning, /missing-..., exist
    target = home / missing / "rota.db"
    url = {
        "path": str(target),
        "relative": f"sqlite:///{missing}/rota.db",
        "absolute": f"sqlite:///{target}",
    }[form]
    message = refused(rota(home, "--store", url, *command), "store_not_found")
    assert str(target.relative_to(home) if form == "relative" else target) in message
    assert not (home / missing).exists()
    assert not (home / "out.jsonl").exists()


def test_only_the_commands_that_write_create_a_store(home: Path) -> None:
    refused(rota(home, "events"), "store_not_found")  # the config's default store
    assert not (home / "rota.db").exists()
    done = rota(home, "submit", "w1", "--binding", "ok")
    assert done.returncode == 0, done.stderr
    assert (home / "rota.db").is_file()  # the default `sqlite:///rota.db`: relative
    for command in READS:
        done = rota(home, *command)
        assert done.returncode == 0, (command, done.stderr)
    # import creates its target
    done = rota(home, "import", "out.jsonl", "--to", "sqlite:///copy.db")
    assert done.returncode == 0, done.stderr
    assert (home / "copy.db").is_file()


def _foreign(path: Path) -> bytes:
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    "command", [("submit", "w1", "--binding", "ok"), ("events",), ("work", "list")]
)
def test_an_sqlite_file_of_another_program_is_refused_never_taken_over(
    home: Path, command: tuple[str, ...]
) -> None:
    other = home / "app.db"
    before = _foreign(other)
    message = refused(rota(home, "--store", str(other), *command), "not_a_rota_store")
    assert "invoices" in message
    assert other.read_bytes() == before
    conn = apsw.Connection(str(other))
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"invoices"}


def test_a_store_written_by_a_newer_rota_is_refused_with_both_versions(home: Path) -> None:
    assert rota(home, "submit", "w1", "--binding", "ok").returncode == 0
    conn = apsw.Connection(str(home / "rota.db"))
    conn.execute("UPDATE rota_meta SET value = '7' WHERE key = 'schema_version'")
    conn.close()
    for command in (("events",), ("submit", "w2", "--binding", "ok")):
        message = refused(rota(home, *command), "schema_too_new")
        assert "schema version 7, newer than this rota's 2" in message


def test_an_absolute_sqlite_url_works_for_every_component(home: Path) -> None:
    db = home / "data dir" / "rota%1.db"
    url = f"sqlite:///{db}"  # four slashes: sqlite:////.../data dir/rota%1.db
    assert url.startswith("sqlite:////")
    assert rota(home, "--store", url, "submit", "w1", "--binding", "ok").returncode == 0
    assert db.is_file()
    done = rota(home, "--store", url, "doctor", "--json")
    assert "invalid uri" not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    assert rota(home, "--store", url, "replay", "rebuild").returncode == 0
    done = rota(  # (healthy projections: --force, or it is refused)
        home, "--store", url, "recover-corrupt", "--backup-name", "b1", "--dry-run", "--force"
    )
    assert done.returncode == 0, done.stderr
    assert "invalid uri" not in done.stdout + done.stderr


def test_a_url_whose_old_meaning_differs_is_refused_loudly(home: Path) -> None:
    old = home / "old.db"
    assert rota(home, "--store", str(old), "submit", "w1", "--binding", "ok").returncode == 0
    written = f"sqlite://{old}"  # three slashes: the absolute path before, relative now
    for command in (("events",), ("submit", "w2", "--binding", "ok")):
        message = refused(rota(home, "--store", written, *command), "store_url_moved")
        assert f"'sqlite:///{old}'" in message  # the URL to write now (four slashes)
        assert str(old) in message
    assert not (home / str(old).lstrip("/")).exists()


def test_a_postgresql_url_without_the_extra_names_what_to_install(home: Path) -> None:
    hide = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None; "
        "from rota.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    for command in (("events",), ("submit", "w1", "--binding", "ok")):
        done = rota(home, "--store", "postgresql://u@h/db", *command, code=hide)
        message = refused(done, "missing_extra")
        assert "install 'rota[postgresql]'" in message
        assert "ModuleNotFoundError" not in done.stderr


@pytest.mark.postgres
def test_a_read_on_a_missing_postgresql_schema_refuses_and_creates_nothing(home: Path) -> None:
    require_postgres()
    import psycopg

    schema = new_schema_name()
    url = schema_url(schema)
    for command in READS[:4]:
        message = refused(rota(home, "--store", url, *command), "store_not_found")
        assert schema in message
    with psycopg.connect(POSTGRES_URL) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    drop_schema(schema)
    assert found is None


@pytest.mark.postgres
def test_a_postgresql_store_written_by_a_newer_rota_is_refused_with_both_versions(
    home: Path,
) -> None:
    require_postgres()
    import psycopg

    schema = new_schema_name()
    url = schema_url(schema)
    try:
        assert rota(home, "--store", url, "submit", "w1", "--binding", "ok").returncode == 0
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"UPDATE {schema}.rota_meta SET value = '9' WHERE key = 'schema_version'")
        for command in (("events",), ("submit", "w2", "--binding", "ok")):
            message = refused(rota(home, "--store", url, *command), "schema_too_new")
            assert "schema version 9, newer than this rota's 2" in message
    finally:
        drop_schema(schema)
