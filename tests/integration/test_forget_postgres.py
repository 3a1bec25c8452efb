"""Forgetting personal data on PostgreSQL: after `forget`, the Work's key and the canary are
in no row of any table of the store's schema (read as text), in no export, and in no
`pg_dump` of the schema taken afterwards; the chain still verifies. (A dead tuple may keep
the key's bytes in the heap until vacuum reuses the page: infrastructure/personal_keys.py.)"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from postgres import POSTGRES_URL, schema_url, temporary_schema

import rota
from rota.infrastructure.personal_keys import PostgresKeys
from rota.infrastructure.postgres.store import PostgresStore
from rota.replay.audit import verify_chain
from rota.replay.export import export_to_file

pytestmark = pytest.mark.postgres
CANARY = "canary-93c1e7-grace@example.org"


@pytest.fixture
def schema() -> Iterator[str]:
    with temporary_schema() as name:
        yield name


def _rows_holding(schema: str, needles: list[str]) -> list[str]:
    """Every table of `schema` whose rows, as text, hold one of `needles`."""
    found = []
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t').fetchall()
            text = "\n".join(str(row[0]) for row in rows)
            found += [f"{table}: {needle}" for needle in needles if needle in text]
    return found


def test_after_forget_no_table_export_or_dump_holds_the_key_or_the_canary(
    schema: str, tmp_path: Path
) -> None:
    url = schema_url(schema)
    seen: list[Any] = []
    with rota.open(url, config={}) as scheduler:
        scheduler.register("mail", lambda ctx: seen.append(ctx.trigger))
        scheduler.submit("W", binding="mail", input={"email": CANARY}, personal=["email"])
        scheduler.submit("keep", binding="mail", input={"email": "x"}, personal=["email"])
        scheduler.run_until_idle()
        assert {"email": CANARY} in seen
        store = scheduler.store
        assert isinstance(store, PostgresStore)
        keys = PostgresKeys(store)
        key = keys.get("W")
        assert key is not None
        needles = [CANARY, key.hex()]  # (bytea reads as \\x<hex> in text)
        assert _rows_holding(schema, needles) == [f"rota_personal_keys: {key.hex()}"]
        before = _dump(schema)
        assert before is None or key.hex() in before  # (what the check below would see)
        position = scheduler.forget("W", by="dpo", reason="erasure")
        assert scheduler.forget("W") == position
        assert keys.get("W") is None and keys.get("keep") is not None
    assert _rows_holding(schema, needles) == []
    exported = tmp_path / "export.jsonl"
    verifying = PostgresStore(url)
    try:
        export_to_file(verifying, exported)
        report = verify_chain(verifying)
        assert report.ok, report
    finally:
        verifying.close()
    data = exported.read_text()
    assert CANARY not in data and key.hex() not in data and "core.work.forgotten" in data
    dump = _dump(schema)
    if dump is None:
        pytest.skip("pg_dump could not run here")
    assert "rota_personal_keys" in dump  # the table is dumped: its live rows only
    assert CANARY not in dump and key.hex() not in dump


def _dump(schema: str) -> str | None:
    """A data-only `pg_dump` of the schema (None when pg_dump cannot run here)."""
    try:
        done = subprocess.run(
            ["pg_dump", "--schema", schema, "--data-only", POSTGRES_URL],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError:
        return None
    return done.stdout if done.returncode == 0 else None
