"""One backend object per store package, chosen by the one URL parser; the in-memory store.

`store_url.backend(url)` is the only place that asks which kind of store a URL names; the
rest of rota calls the object it returns. `memory://name` is shared by every handle in this
process, `memory://` is private; both are usable from `rota.open`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

import rota
from rota.application.errors import PortCode, StoreError
from rota.infrastructure.backend import NOT_APPLICABLE, Backend, Isolation, IsolationRefused
from rota.infrastructure.memory.backend import MemoryBackend, forget
from rota.infrastructure.postgres.backend import PostgresBackend
from rota.infrastructure.sqlite.backend import SQLiteBackend
from rota.infrastructure.store_url import MemoryURL, backend, parse
from rota.infrastructure.stores import open_store
from rota.replay.daemon_lock import DaemonLock, StoreBusy
from rota.replay.doctor import doctor
from rota.replay.rebuild import rebuild
from rota.replay.recover_corrupt import recover_corrupt
from rota.replay.recovery_report import RecoveryRefused

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["rota", "domain", "projections", "application", "infrastructure", "replay"]


@pytest.fixture
def name() -> Iterator[str]:
    found = f"unit-{uuid.uuid4().hex}"
    yield found
    forget(found)


def test_the_url_parser_picks_each_backend(tmp_path: Path) -> None:
    assert isinstance(backend(tmp_path / "rota.db"), SQLiteBackend)
    assert isinstance(backend(f"sqlite:///{tmp_path}/rota.db"), SQLiteBackend)
    assert isinstance(backend("postgresql://u@h/db?schema=s"), PostgresBackend)
    assert isinstance(backend("memory://tests"), MemoryBackend)
    assert isinstance(backend("memory://"), MemoryBackend)
    assert parse("memory://tests") == MemoryURL("memory://tests")
    assert parse("memory://tests").name == "tests"  # type: ignore[union-attr]
    assert backend(tmp_path / "rota.db").log_file == tmp_path / "rota.db"
    assert backend("memory://tests").log_file is None
    assert backend("postgresql://u@h/db").log_file is None


@pytest.mark.parametrize("url", ["memory://a/b", "memory://a?x=1"])
def test_a_memory_url_with_a_path_or_a_query_is_refused(url: str) -> None:
    with pytest.raises(StoreError) as raised:
        parse(url)
    assert raised.value.code == PortCode.INVALID_STORE_URL


def test_no_module_but_the_url_parser_asks_which_store_a_url_names() -> None:
    asks = re.compile(r"is_postgres|POSTGRES_SCHEMES|startswith\(\(?\"postgres")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in PRODUCT
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "store_url.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert not found, found


def test_no_module_probes_a_store_for_what_the_port_declares() -> None:
    probe = re.compile(r"getattr\([\w.]*(log|store)\w*, \"(url|path|clock|reopened)\"")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in PRODUCT
        for path in (ROOT / folder).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if probe.search(line)
    ]
    assert not found, found


def test_a_named_memory_store_is_shared_and_a_bare_one_is_private(name: str) -> None:
    first, second = open_store(f"memory://{name}"), open_store(f"memory://{name}")
    rota_event = first.read(0, 1)
    assert rota_event == []
    with rota.Scheduler(open_store(f"memory://{name}"), owner="a") as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job")
    assert first.head() == second.head() and first.head().position > 0
    assert first.store_id == second.store_id
    private = open_store("memory://")
    assert private.head().position == 0 and private.store_id != first.store_id
    assert open_store("memory://").store_id != private.store_id
    reopened = private.reopened()
    assert reopened is not None and reopened.store_id == private.store_id


def test_a_missing_memory_store_is_not_created_by_a_reader(name: str) -> None:
    with pytest.raises(StoreError) as raised:
        open_store(f"memory://{name}", create=False)
    assert raised.value.code == PortCode.STORE_NOT_FOUND


def test_rota_open_on_memory_keeps_and_reloads_its_projections(name: str) -> None:
    with rota.open(f"memory://{name}") as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job")
        assert scheduler.service.stored is not None
    with rota.open(f"memory://{name}", projections=f"memory://{name}") as again:
        stored = again.service.stored
        assert stored is not None and stored.store.meta("scheduler") is not None
        assert again.store.head().position > 0


def test_the_memory_daemon_lock_is_shared_by_daemons_and_excluded_by_a_recovery(
    name: str,
) -> None:
    url = f"memory://{name}"
    with DaemonLock.for_store(url), DaemonLock.for_store(url):  # two racing daemons
        lock = backend(url).daemon_lock(exclusive=True)
        assert lock is not None and lock.held_by_another()
        with pytest.raises(StoreBusy, match="stop 'rota run' first"):
            DaemonLock.for_store(url, exclusive=True).acquire()
    recovery = DaemonLock.for_store(url, exclusive=True).acquire()
    with pytest.raises(StoreBusy, match="recover-corrupt holds"):
        DaemonLock.for_store(url).acquire()
    recovery.release()
    assert not lock.held_by_another()


def test_doctor_reads_a_memory_store_and_recover_corrupt_refuses_it(name: str) -> None:
    url = f"memory://{name}"
    with rota.open(url) as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job")
    report = doctor(url)
    checks = {c.name: c for c in report.checks}
    assert report.ok, report.checks
    assert checks["projection_drift"].status == "ok"
    assert "memory://" in checks["projection_integrity"].detail
    with pytest.raises(RecoveryRefused, match="nothing to isolate"):
        recover_corrupt(url, "b1")


def test_eventsourcing_cannot_follow_a_memory_store() -> None:
    from rota.infrastructure.eventsourcing.follow import RotaLog

    with pytest.raises(StoreError):
        RotaLog.env_for("memory://x")
    assert RotaLog.env_for("postgresql://u@h/db")["POSTGRES_URL"] == "postgresql://u@h/db"


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def kept(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> Iterator[str]:
    """A store of each kind with one Work in its log and its projections rebuilt."""
    with ExitStack() as stack:
        if request.param == "postgres":
            from postgres import schema_url, temporary_schema

            url = schema_url(stack.enter_context(temporary_schema()))
        else:
            url = str(tmp_path / "rota.db") if request.param == "sqlite" else f"memory://{name}"
        with rota.open(url) as scheduler:
            scheduler.register("job", lambda ctx: None)
            scheduler.submit("w", binding="job")
        found = backend(url)
        with found.open_log() as log:
            tables = found.projections_beside(log)
            assert tables is not None
            try:
                rebuild(log, tables)
            finally:
                tables.close()
        yield url


def test_each_backend_checks_its_log_or_says_it_is_not_applicable(kept: str) -> None:
    found = backend(kept)
    if found.log_file is None:  # the server checks its own pages
        assert found.check_integrity() == (True, NOT_APPLICABLE)
        return
    path = found.log_file
    assert found.check_integrity() == (True, f"PRAGMA integrity_check of {path}: ok")
    assert found.check_integrity(immutable=True).sound
    path.write_bytes(path.read_bytes()[:100] + b"\0" * 4096)
    damaged = found.check_integrity(immutable=True)
    assert not damaged.sound and damaged.detail.startswith(f"{path}: ")


def _isolation(found: Backend, name: str, stack: ExitStack) -> Isolation:
    """A file is isolated unopened (`<log>.projections`); tables through their store."""
    if found.log_file is not None:
        return found.isolate_projections(None, name)
    log = stack.enter_context(found.open_log())
    tables = found.projections_beside(log, must_exist=True)
    assert tables is not None
    stack.callback(tables.close)
    return found.isolate_projections(tables, name)


def test_each_backend_isolates_its_projections_or_refuses(kept: str) -> None:
    found = backend(kept)
    if kept.startswith("memory://"):  # its projections die with the process
        with ExitStack() as stack, pytest.raises(IsolationRefused) as refused:
            _isolation(found, "b1", stack)
        assert refused.value.code == PortCode.NOT_SQLITE
        assert "nothing to isolate" in refused.value.message
        return
    with ExitStack() as stack:
        isolation = _isolation(found, "b1", stack)
        planned = isolation.planned()
        assert planned and all(len(c.sha256) == 64 for c in planned)
        moved = isolation.run({"tool": "test", "created_at": "now"})
        assert [(c.name, c.size, c.sha256) for c in moved] == [
            (c.name, c.size, c.sha256) for c in planned
        ]
    path = found.log_file
    if path is not None:  # the file moved aside, with its manifest
        target = path.parent / "diagnostics" / "scheduler-recovery" / "b1"
        assert not Path(f"{path}.projections").exists()
        assert (target / f"{path.name}.projections").is_file()
        manifest = json.loads((target / "manifest.json").read_text())
        assert manifest["tool"] == "test" and [f["name"] for f in manifest["files"]] == [
            c.name for c in moved
        ]
        assert isolation.backup == str(target)
    else:  # the rows moved aside: the tables are empty
        assert any(c.rows for c in moved)
        with ExitStack() as stack:
            again = _isolation(found, "b2", stack)
            assert all(c.rows == 0 for c in again.planned())
    with ExitStack() as stack, pytest.raises(IsolationRefused) as refused:
        _isolation(found, "b1", stack)
    assert refused.value.code == PortCode.BACKUP_EXISTS
    if path is not None:  # nothing left to isolate
        with pytest.raises(IsolationRefused) as refused:
            found.isolate_projections(None, "b3")
        assert refused.value.code == PortCode.NO_PROJECTION_STORE


def test_replay_moves_no_projection_and_runs_no_integrity_check_itself() -> None:
    """The file moves, the recovery SQL and the integrity pragma are the backends' (replay
    keeps the guards and the reports, `isolate_projections`, `check_integrity`)."""
    adapter = re.compile(
        r"os\.(rename|mkdir|unlink)\(|INSERT INTO|DELETE FROM|PRAGMA integrity_check\"|"
        r"isinstance\([^)]*PostgresProjectionStore"
    )
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "replay").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if adapter.search(line)
    ]
    assert not found, found
