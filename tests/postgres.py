"""PostgreSQL test helpers: the server, a fresh schema per test, the CI rule, and a database
clock a test can set.

The server is `ROTA_TEST_POSTGRES` (default `postgresql://postgres@127.0.0.1:5432/test`).
When it cannot be reached, PostgreSQL tests are skipped, except under `CI=true`, where they
fail: in CI the PostgreSQL tests must run.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import psycopg
import pytest

POSTGRES_URL = os.environ.get("ROTA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
_state: dict[str, str | None] = {}


def require_postgres() -> str:
    """The server URL; skips the test (fails it under CI=true) if the server is unreachable."""
    if "error" not in _state:
        try:
            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _state["error"] = None
        except psycopg.Error as exc:
            _state["error"] = str(exc).strip() or type(exc).__name__
    error = _state["error"]
    if error is not None:
        message = f"PostgreSQL (ROTA_TEST_POSTGRES) is unreachable: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; in CI the PostgreSQL tests must run", pytrace=False)
        pytest.skip(message)
    return POSTGRES_URL


def new_schema_name() -> str:
    return f"rota_test_{secrets.token_hex(6)}"


def schema_url(schema: str) -> str:
    """The server URL with `?schema=` naming `schema` (what `open_store` and children take)."""
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}schema={schema}"


def drop_schema(schema: str) -> None:
    assert schema.startswith("rota_test_") and schema.replace("_", "").isalnum()
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def admin_execute(sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run one statement on its own autocommit connection (test setup: triggers, locks)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(sql.encode(), params)
        return cursor.fetchall() if cursor.description else []


@contextmanager
def temporary_schema() -> Iterator[str]:
    """A unique `rota_test_<hex>` schema name, dropped (CASCADE) afterwards."""
    require_postgres()
    schema = new_schema_name()
    try:
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    with temporary_schema() as schema:
        yield schema


class DatabaseClock:
    """The database's clock in one test schema, set by the test (and able to step back).

    The PostgreSQL store reads time only from the database, with an unqualified
    `clock_timestamp()`. This creates `"<schema>".clock_timestamp()`, reading a one-row
    table, and `url` is the schema's URL with `search_path` set to `<schema>, pg_catalog`
    for the store's own sessions, so their `clock_timestamp()` resolves to it (built-ins
    are shadowed only when `pg_catalog` is named last). The store's clock is still the
    database's; only this test sets it. Every other session, and the server, is untouched.
    """

    def __init__(self, schema: str, start: datetime) -> None:
        assert schema.startswith("rota_test_") and schema.replace("_", "").isalnum()
        self.schema = schema
        admin_execute(
            f'CREATE SCHEMA IF NOT EXISTS "{schema}"; '
            f'CREATE TABLE "{schema}".test_clock (at timestamptz NOT NULL); '
            f'CREATE FUNCTION "{schema}".clock_timestamp() RETURNS timestamptz '
            f'LANGUAGE sql STABLE AS $$ SELECT at FROM "{schema}".test_clock $$'
        )
        admin_execute(f'INSERT INTO "{schema}".test_clock VALUES (%s)', (start,))
        search_path = quote(f"-c search_path={schema},pg_catalog")
        self.url = f"{schema_url(schema)}&options={search_path}"

    def now(self) -> datetime:
        rows = admin_execute(f'SELECT at FROM "{self.schema}".test_clock')
        when = rows[0][0]
        assert isinstance(when, datetime)
        return when.astimezone(UTC)

    def set(self, when: datetime) -> None:
        admin_execute(f'UPDATE "{self.schema}".test_clock SET at = %s', (when,))

    def advance(self, seconds: float) -> datetime:
        when = self.now() + timedelta(seconds=seconds)
        self.set(when)
        return when
