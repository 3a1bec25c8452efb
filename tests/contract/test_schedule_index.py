"""The schedule streams' index: a schedules projection is folded from the schedule streams'
events without scanning the whole log, and a log created before the index gets it when it
is next opened (on PostgreSQL also by a handle that may not create a log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest
from postgres import POSTGRES_URL, schema_url, temporary_schema

from rota.application.ports import EventStore, NewEvent
from rota.domain.events import WorkSubmitted
from rota.infrastructure.postgres.log_sql import SCHEDULE_INDEX
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store


def fill(store: EventStore) -> None:
    store.append(
        [
            NewEvent(f"work/w{n}", WorkSubmitted(work_id=f"w{n}", scope="root", binding="b"))
            for n in range(200)
        ]
    )
    store.append([NewEvent("schedule/a", WorkSubmitted(work_id="a", scope="root", binding="b"))])


def statements(store: Any, prefix: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The SQL `read_prefix(prefix)` runs, and its parameters."""
    reads = store._reads
    seen: list[tuple[str, tuple[Any, ...]]] = []
    query = reads._query

    def spy(sql: str, params: Any = ()) -> list[Any]:
        seen.append((sql, tuple(params)))
        return query(sql, params)

    reads._query = spy
    try:
        store.read_prefix(prefix)
    finally:
        reads._query = query
    return seen


def sqlite_plan(store: SQLiteStore, prefix: str) -> str:
    ((sql, params),) = statements(store, prefix)
    rows = store._reader().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return " ".join(str(row[-1]) for row in rows)


@pytest.mark.parametrize("prefix", ["schedule", "schedule/", "schedules/"])
def test_sqlite_reads_the_schedule_streams_through_their_index(tmp_path: Path, prefix: str) -> None:
    store = SQLiteStore(tmp_path / "log.db", synchronous="normal")
    try:
        fill(store)
        assert "events_schedules" in sqlite_plan(store, prefix)
        assert "events_schedules" not in sqlite_plan(store, "work/")
    finally:
        store.close()


def test_a_sqlite_log_without_the_index_gets_it_when_next_opened(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    SQLiteStore(path, synchronous="normal").close()
    conn = apsw.Connection(str(path))
    conn.execute("DROP INDEX events_schedules")
    conn.close()
    store = SQLiteStore(path, synchronous="normal", create=False)
    try:
        fill(store)
        assert "events_schedules" in sqlite_plan(store, "schedule")
        assert [e.stream for e in store.read_prefix("schedule")] == ["schedule/a"]
    finally:
        store.close()


def pg_plan(store: PostgresStore, prefix: str) -> str:
    ((sql, params),) = statements(store, prefix)
    with psycopg.connect(POSTGRES_URL, autocommit=False) as conn:
        conn.execute("SET LOCAL enable_seqscan = off")  # a tiny table: make it choose an index
        rows = conn.execute("EXPLAIN " + sql, params).fetchall()
    return " ".join(str(row[0]) for row in rows)


@pytest.mark.postgres
def test_postgresql_reads_the_schedule_streams_through_their_index() -> None:
    with temporary_schema() as schema:
        store = open_store(schema_url(schema))
        assert isinstance(store, PostgresStore)
        try:
            fill(store)
            assert SCHEDULE_INDEX in pg_plan(store, "schedule")
            assert SCHEDULE_INDEX in pg_plan(store, "schedule/")
            assert SCHEDULE_INDEX not in pg_plan(store, "work/")
            assert [e.stream for e in store.read_prefix("schedule/")] == ["schedule/a"]
        finally:
            store.close()


@pytest.mark.postgres
def test_a_postgresql_log_without_the_index_gets_it_when_next_opened() -> None:
    with temporary_schema() as schema:
        open_store(schema_url(schema)).close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP INDEX "{schema}".{SCHEDULE_INDEX}')
        store = open_store(schema_url(schema), create=False)
        try:
            with psycopg.connect(POSTGRES_URL) as conn:
                found = conn.execute(
                    "SELECT to_regclass(%s)", (f'"{schema}".{SCHEDULE_INDEX}',)
                ).fetchone()
            assert found is not None and found[0] is not None
        finally:
            store.close()


@pytest.mark.postgres
def test_a_role_that_may_not_add_the_index_opens_the_log_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with temporary_schema() as schema:
        writer = open_store(schema_url(schema))
        fill(writer)
        writer.close()
        role = f"{schema}_reader"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP INDEX "{schema}".{SCHEDULE_INDEX}')
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
        try:
            url = schema_url(schema).replace("://postgres@", f"://{role}@", 1)
            assert role in url
            with caplog.at_level("WARNING", logger="rota.infrastructure.postgres.store"):
                store = open_store(url, create=False)
            try:
                assert [e.stream for e in store.read_prefix("schedule")] == ["schedule/a"]
            finally:
                store.close()
            said = " ".join(r.getMessage() for r in caplog.records)
            assert "could not add it" in said and "schedule reads scan the log" in said
            assert role not in said and "postgresql://" not in said  # no connection details
        finally:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")
