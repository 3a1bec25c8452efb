"""Projections kept in the PostgreSQL log's own schema: rota.open saves and reloads them,
refusals, the writer's advisory lock, and every replay, audit and operations command
against a `postgresql://` URL with no `--projections`.

Every test runs in its own schema (dropped afterwards); PostgreSQL is ROTA_TEST_POSTGRES
(skipped when unreachable, failed under CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres import admin_execute, schema_url, temporary_schema

import rota
from rota.application.errors import ProjectionStoreError
from rota.application.live_projections import LiveProjections
from rota.infrastructure.postgres.projection_store import PostgresProjectionStore
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.projection_stores import open_projection_store
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stored_works import StoredWorks
from rota.infrastructure.stores import open_store
from rota.projections import HistoryProjection, SchedulerProjection
from rota.replay.rebuild import fold, rebuild, verify

pytestmark = pytest.mark.postgres
CONFIG = {"settings": {"concurrency": 2}}


@pytest.fixture
def schema() -> Iterator[str]:
    with temporary_schema() as name:
        yield name


@pytest.fixture
def url(schema: str) -> str:
    return schema_url(schema)


def _echo(ctx: rota.LaunchContext) -> dict[str, Any]:
    return {"inputs": ctx.inputs, "attempt": ctx.attempt}


def populate(target: str | Path, works: tuple[str, ...] = ("a", "b", "c")) -> int:
    """Run a few Works to completion through rota.open; the log head afterwards."""
    with rota.open(target, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        for work in works:
            scheduler.submit(work, binding="echo", input={"work": work})
        scheduler.run_until_idle(timeout=30)
        assert all(w.state == "completed" for w in scheduler.works())
        return scheduler.store.head().position


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ROTA_STORE": ""},
    )


def tamper(schema: str, key: str, old: str, new: str, projection: str = "scheduler") -> None:
    """Edit one stored row (of the scheduler projection unless told) with plain SQL, as a
    careless hand would."""
    table = f'"{schema}".rota_projection_rows_{projection}'
    changed = admin_execute(
        f"UPDATE {table} SET value = convert_to(replace(convert_from(value, 'UTF8'), %s, %s), "
        "'UTF8') WHERE key = %s RETURNING key",
        (old, new, key),
    )
    assert changed == [(key,)]


def metas(url: str) -> dict[str, Any]:
    with PostgresProjectionStore(url, create=False) as tables:
        return tables.metas()


# -- rota.open keeps the projections in the schema ------------------------------------------


def test_rota_open_saves_projections_and_the_next_open_reads_no_event_before_them(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = populate(url)
    stored = metas(url)
    assert {name: m.position for name, m in stored.items()} == {"history": head, "scheduler": head}

    reads: list[int] = []
    original = PostgresStore.read

    def counted(self: PostgresStore, after: int = 0, limit: int = 1000) -> Any:
        reads.append(after)
        return original(self, after, limit)

    monkeypatch.setattr(PostgresStore, "read", counted)
    with rota.open(url, config=CONFIG) as scheduler:
        live = scheduler.service.stored
        assert live is not None and live.writer
        assert isinstance(live.store, PostgresProjectionStore)
        assert live.store.last_refusal is None
        assert scheduler.service.projection.position == head
        assert [w.state for w in scheduler.works()] == ["completed"] * 3
    # Catch-up read only what follows the stored position: no event from position 0.
    assert reads and min(reads) == head


def test_saved_projections_load_equal_to_a_fold_of_the_log(url: str) -> None:
    populate(url)
    with open_store(url) as log, PostgresProjectionStore(url) as tables:
        scheduler, history = SchedulerProjection(), HistoryProjection()
        fold(log, [scheduler, history])
        loaded = tables.load_scheduler(log)
        loaded_history = tables.load_history(log)
        assert loaded is not None and loaded_history is not None, tables.last_refusal
        assert loaded.digest() == scheduler.digest()
        assert loaded_history.digest() == history.digest()
        # A save round trip of the fold itself: whole (first write of this store), then
        # nothing dirty.
        tables.replace([scheduler, history], log)
        assert tables.save([scheduler, history], log) == 0
        reloaded = tables.load_scheduler(log)
        assert reloaded is not None and reloaded.digest() == scheduler.digest()
        assert verify(log, tables).ok


def test_the_keeper_opens_with_its_active_works_and_finds_the_rest_on_demand(url: str) -> None:
    populate(url, works=("a", "b", "c", "d"))
    expected = SchedulerProjection()
    with open_store(url) as log:
        fold(log, [expected])
    with rota.open(url, config=CONFIG) as scheduler:
        works = scheduler.service.projection.works
        assert isinstance(works, StoredWorks)
        assert list(works.in_memory()) == []  # every Work completed: none active
        assert works["c"] == expected.works["c"] and works.fetched == 1
        assert [w.id for w in scheduler.works()] == ["a", "b", "c", "d"]
        assert scheduler.service.projection.digest() == expected.digest()
    # The lazy open's key-range reads on the tables (byte order, whatever the collation).
    with open_store(url) as log, PostgresProjectionStore(url) as tables:
        loaded = tables.load_scheduler(log, lazy=True)
        assert loaded is not None and isinstance(loaded.works, StoredWorks)
        rows, ours = tables._stored_work_rows()
        assert ours  # this process loaded what the tables hold
        assert sorted(key for key, _ in rows) == [f"work/{w}" for w in "abcd"]
        assert loaded.digest() == expected.digest()


def test_a_keeper_saves_whole_after_another_process_rebuilt_the_tables(url: str) -> None:
    populate(url, works=("a", "b"))
    with rota.open(url, config=CONFIG) as scheduler:
        assert isinstance(scheduler.service.projection.works, StoredWorks)
        with open_store(url) as log, PostgresProjectionStore(url) as other:
            rebuild(log, other)  # another process: a new generation of the tables
        scheduler.register("echo", lambda ctx: None)  # known here: a submit is accepted
        scheduler.submit("c", binding="echo", input={"work": "c"})
        live = scheduler.service.stored
        assert live is not None
        # Written whole, inside its transaction reading (and folding) the Works it lacks.
        assert live.save(scheduler.service.projection), live.failed
    with open_store(url) as log, PostgresProjectionStore(url) as tables:
        assert verify(log, tables).ok


def test_a_version_bump_or_another_log_is_refused(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(url)
    other_db = tmp_path / "other.db"
    populate(other_db, works=("x", "y", "z", "w", "v"))  # longer, another chain
    with open_store(url) as log, PostgresProjectionStore(url) as tables:
        with SQLiteStore(other_db) as other:
            assert tables.load_scheduler(other) is None
            assert "hash" in (tables.last_refusal or "")
        assert tables.load_scheduler(log) is not None
        monkeypatch.setattr(SchedulerProjection, "version", SchedulerProjection.version + 1)
        assert tables.load_scheduler(log) is None
        assert "fold version" in (tables.last_refusal or "")


def test_one_writer_holds_the_advisory_lock(url: str) -> None:
    populate(url)
    with open_store(url) as log:
        first = LiveProjections(PostgresProjectionStore(url), log)
        second = LiveProjections(PostgresProjectionStore(url), log)
        try:
            first_projection = first.open()
            second_projection = second.open()
            assert first.writer and not second.writer
            # The second still starts from the stored projection, in memory only.
            assert second_projection.position == first_projection.position > 0
            assert not second.save(second_projection)
        finally:
            second.close(second_projection)
            first.close(first_projection)
        third = LiveProjections(PostgresProjectionStore(url), log)
        third_projection = third.open()
        third.close(third_projection)
        assert third.writer and third_projection.position > 0  # released with the session


def test_a_keeper_whose_session_died_stops_writing_once_another_took_the_lock(url: str) -> None:
    populate(url)
    with open_store(url) as log:
        first, second = PostgresProjectionStore(url), PostgresProjectionStore(url)
        try:
            assert first.writer_lock().acquire()
            pid = first._session.info.backend_pid  # type: ignore[union-attr]
            # The server ends the keeper's session (waiting up to 5 s for it to exit).
            assert admin_execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)) == [(True,)]
            assert second.writer_lock().acquire()  # the lock died with the session
            loaded = first.load_scheduler(log)  # reconnects; cannot take the lock back
            assert loaded is not None
            with pytest.raises(ProjectionStoreError) as lost:
                first.save(loaded, log)
            assert lost.value.code == "writer_lock_lost"
        finally:
            first.close()
            second.close()


def test_the_factory_picks_the_schema_and_a_named_file_wins(url: str, tmp_path: Path) -> None:
    with open_store(url) as log:
        found = open_projection_store(log)
        assert isinstance(found, PostgresProjectionStore)
        assert found.schema == url.rsplit("=", 1)[1]
        found.close()
        named = open_projection_store(log, tmp_path / "p.projections")
        assert named is not None and not isinstance(named, PostgresProjectionStore)
        named.close()


# -- the commands, against the URL alone -----------------------------------------------------


def test_replay_verify_rebuild_at_and_explain_need_no_projections_option(
    url: str, schema: str, tmp_path: Path
) -> None:
    head = populate(url)
    done = run_cli("--store", url, "replay", "verify", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"scheduler: ok at position {head}" in done.stdout

    tamper(schema, "work/b", '"kind":"run-once"', '"kind":"standing"')
    done = run_cli("--store", url, "replay", "verify", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    drift = next(v for v in report["projections"] if v["status"] == "drift")
    assert (drift["name"], drift["first_key"]) == ("scheduler", "work/b")
    assert report["path"] == f"PostgreSQL schema {schema!r}"

    done = run_cli("--store", url, "replay", "rebuild", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"at position {head}" in done.stdout
    assert run_cli("--store", url, "replay", "verify", cwd=tmp_path).returncode == 0
    assert metas(url)["scheduler"].rebuilt_at is not None

    done = run_cli("--store", url, "replay", "at", "--position", str(head), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["scheduler"]["works"]["a"]["state"] == "completed"

    done = run_cli("--store", url, "explain", "a", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "completed"


def test_verify_without_projection_tables_says_so(url: str, tmp_path: Path) -> None:
    with open_store(url):
        pass  # the log's schema, no projection tables
    done = run_cli("--store", url, "replay", "verify", cwd=tmp_path)
    assert done.returncode == 1
    assert "no_projection_store" in done.stderr and "replay rebuild" in done.stderr


def test_doctor_is_ok_on_a_healthy_store_and_fails_drift_after_tampering(
    url: str, schema: str, tmp_path: Path
) -> None:
    populate(url)
    done = run_cli("--store", url, "doctor", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["log_integrity"]["status"] == "ok"
    assert "not applicable on PostgreSQL" in checks["log_integrity"]["detail"]
    assert checks["projection_integrity"]["status"] == "ok"
    assert "every row read" in checks["projection_integrity"]["detail"]
    assert checks["projection_drift"]["status"] == "ok"
    assert "equal to a replay" in checks["projection_drift"]["detail"]
    assert checks["projection_lag"]["status"] == "ok"
    for name in ("expired_leases", "overdue_timers", "capacity", "budgets", "crash_loop"):
        assert checks[name]["status"] == "ok", checks[name]

    tamper(schema, "work/c", '"kind":"run-once"', '"kind":"standing"')
    done = run_cli("--store", url, "doctor", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["projection_drift"]["status"] == "fail"
    assert "work/c" in checks["projection_drift"]["detail"]
    assert "recover-corrupt" in checks["projection_drift"]["advice"]


def test_recover_corrupt_isolates_the_rows_and_rebuilds(
    url: str, schema: str, tmp_path: Path
) -> None:
    head = populate(url)
    tamper(schema, "work/a", '"kind":"run-once"', '"kind":"standing"')
    damaged = admin_execute(
        f"SELECT value FROM \"{schema}\".rota_projection_rows_scheduler WHERE key = 'work/a'"
    )[0][0]
    done = run_cli("--store", url, "recover-corrupt", "--backup-name", "n-1", "--dry-run",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert run_cli("--store", url, "replay", "verify", cwd=tmp_path).returncode == 1

    with PostgresProjectionStore(url) as keeper:  # a scheduler keeping the projections
        assert keeper.writer_lock().acquire()
        done = run_cli("--store", url, "recover-corrupt", "--backup-name", "n-1", cwd=tmp_path)
        assert done.returncode == 1 and "store_busy" in done.stderr, done.stderr

    done = run_cli("--store", url, "recover-corrupt", "--backup-name", "n-1", "--json",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verified"] is True and report["appended"] == 0
    assert report["log_head_before"] == report["log_head_after"] == head
    assert {f["name"] for f in report["files"]} == {
        "rota_projection_meta",
        "rota_projection_rows_scheduler",
        "rota_projection_rows_history",
    }
    kept = admin_execute(
        f'SELECT value FROM "{schema}".rota_projection_recovery '
        "WHERE backup = 'n-1' AND source = 'rota_projection_rows_scheduler' AND key = 'work/a'"
    )
    assert kept == [(damaged,)]  # isolated byte for byte
    manifest = json.loads(
        admin_execute(
            f'SELECT manifest FROM "{schema}".rota_projection_recovery_manifest '
            "WHERE backup = 'n-1'"
        )[0][0]
    )
    assert manifest["log_head"] == head and len(manifest["tables"]) == 3
    assert run_cli("--store", url, "doctor", cwd=tmp_path).returncode == 0

    done = run_cli("--store", url, "recover-corrupt", "--backup-name", "n-1", cwd=tmp_path)
    assert done.returncode == 1 and "backup_exists" in done.stderr
    # Healthy now: refused unless --force (nothing moves), then forced.
    done = run_cli("--store", url, "recover-corrupt", "--backup-name", "n-2", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith("rota: projection_healthy: ")
    assert admin_execute(
        f"SELECT count(*) FROM \"{schema}\".rota_projection_recovery WHERE backup = 'n-2'"
    ) == [(0,)]
    done = run_cli("--store", url, "recover-corrupt", "--backup-name", "n-2", "--force",
                   "--json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["forced"] is True


def test_sqlite_to_postgresql_moves_and_projections_are_kept_there(
    url: str, tmp_path: Path
) -> None:
    db = tmp_path / "rota.db"
    head = populate(db)
    export = tmp_path / "rota.export.jsonl"
    done = run_cli("--store", f"sqlite:///{db}", "export", "--out", str(export), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = run_cli("import", str(export), "--to", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = run_cli("--store", url, "audit", "verify", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("ok: "), done.stdout + done.stderr

    with rota.open(url, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        live = scheduler.service.stored
        assert live is not None and isinstance(live.store, PostgresProjectionStore)
        assert "nothing stored yet" in (live.store.last_refusal or "")  # folded once
        scheduler.submit("d", binding="echo", input={"work": "d"})
        scheduler.run_until_idle(timeout=30)
        new_head = scheduler.store.head().position
    assert new_head > head
    assert {m.position for m in metas(url).values()} == {new_head}
    with rota.open(url, config=CONFIG) as scheduler:
        live = scheduler.service.stored
        assert live is not None and live.store.last_refusal is None  # loaded, not folded
        assert scheduler.work("d").state == "completed"
    # And the PostgreSQL log exports again, verified.
    again = tmp_path / "again.jsonl"
    done = run_cli("--store", url, "export", "--out", str(again), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert run_cli("audit", "verify", "--file", str(again), cwd=tmp_path).returncode == 0
