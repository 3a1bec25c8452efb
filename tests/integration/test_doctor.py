"""`rota doctor`: the report's shape, strict read-only-ness, every check's verdict on a
healthy store, on a scheduler's troubles (expired leases, overdue timers, capacity, budget
and crash-loop holds), on a damaged log and on a damaged projection file."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw
import pytest

import rota
from rota.application.service import SchedulerService
from rota.domain.events.admission import Budget
from rota.domain.policy import Binding, Registration, RetryPolicy, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.checkpoint import Checkpointer
from rota.replay.doctor import doctor

NAMES = [
    "log_integrity",
    "hash_chain",
    "checkpoint",
    "projection_integrity",
    "projection_drift",
    "projection_lag",
    "expired_leases",
    "overdue_timers",
    "capacity",
    "budgets",
    "crash_loop",
    "recovery_exhausted",
    "retention_overdue",
    "schedule_accounting",
    "schedule_drift",
    "schedule_quarantine",
    "schedule_health",
]
LOG_CHECKS = ("log_integrity", "hash_chain", "checkpoint")
PAGE = 4096


# -- a real store and its projection file ---------------------------------------------------


def build_store(directory: Path, works: int = 40) -> Path:
    """A log written by a scheduler running in-process Work, and its projection file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "rota.db"

    def work(ctx: rota.LaunchContext) -> dict[str, Any]:
        if ctx.trigger.get("n", 0) % 7 == 3:
            raise rota.Fail("odd", "a seventh of them fail", permanent=True)
        return {"echo": ctx.trigger, "text": "x" * (ctx.trigger.get("n", 0) % 50)}

    with rota.open(path, config={}) as scheduler:
        scheduler.register("work", work, retry=RetryPolicy(max_attempts=1))
        for n in range(works):
            scheduler.submit(f"w-{n:03d}", binding="work", input={"n": n})
        scheduler.run_until_idle(timeout=60)
    # Closing saved the scheduler's projections beside the log, current at its head.
    assert Path(f"{path}.projections").is_file()
    assert not Path(f"{path}.projections-wal").exists()
    return path


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("template"))


def copy_store(template: Path, directory: Path) -> Path:
    """A private copy of the template store (log and projection file) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (template.name, f"{template.name}.projections"):
        shutil.copy2(template.parent / name, directory / name)
    return directory / template.name


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    return copy_store(template, tmp_path / "store")


def snapshot(directory: Path) -> dict[str, Any]:
    """Every entry under `directory` (not following links): type, bytes' SHA-256, mtime."""
    found: dict[str, Any] = {}
    for root, dirs, files in os.walk(directory, followlinks=False):
        for name in dirs + files:
            path = Path(root, name)
            rel = str(path.relative_to(directory))
            st = os.lstat(path)
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns)
    return found


def log_facts(log: Path) -> tuple[str, int, int, int]:
    """The log file's SHA-256, its events, delivery identities and distinct identities
    (read with an immutable connection: creates nothing)."""
    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    conn = apsw.Connection(
        f"file:{log}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        row = conn.execute(
            "SELECT count(*), count(delivery_id), count(DISTINCT delivery_id) FROM events"
        ).fetchone()
    finally:
        conn.close()
    assert row is not None
    return digest, int(row[0]), int(row[1]), int(row[2])


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


def statuses(report: Any) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


# -- damage ---------------------------------------------------------------------------------


def row_values(projections: Path) -> list[bytes]:
    """Stored row values small enough to sit whole on one page."""
    conn = apsw.Connection(
        f"file:{projections}?mode=ro&immutable=1",
        flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
    )
    try:
        found = []
        for table in ("rows_scheduler", "rows_history"):
            for (value,) in conn.execute(f"SELECT value FROM {table}"):
                data = value.encode() if isinstance(value, str) else bytes(value)
                if 8 <= len(data) <= 1500:
                    found.append(data)
        return found
    finally:
        conn.close()


def flip_bits(projections: Path, rng: random.Random, flips: int) -> list[int]:
    """Flip one bit at each of `flips` random bytes of stored row values; their offsets."""
    blob = bytearray(projections.read_bytes())
    values = [v for v in row_values(projections) if bytes(blob).count(v) == 1]
    offsets = []
    for value in rng.sample(values, flips):
        offset = bytes(blob).find(value) + rng.randrange(len(value))
        assert offset >= PAGE  # never the database header page
        blob[offset] ^= 1 << rng.randrange(8)
        offsets.append(offset)
    projections.write_bytes(bytes(blob))
    return offsets


def overwrite_page(projections: Path, rng: random.Random) -> int:
    """Overwrite one whole page (not the first) with random bytes; its number (1-based)."""
    pages = projections.stat().st_size // PAGE
    page = rng.randrange(2, pages + 1)
    with projections.open("r+b") as out:
        out.seek((page - 1) * PAGE)
        out.write(rng.randbytes(PAGE))
    return page


# -- the tests ------------------------------------------------------------------------------


def test_a_healthy_store_is_ok_and_doctor_changes_nothing(store: Path) -> None:
    before = snapshot(store.parent)
    done = run_cli("--store", str(store), "doctor", "--json", cwd=store.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert set(report) == {"ok", "checks"} and report["ok"] is True
    assert [c["name"] for c in report["checks"]] == NAMES
    for check in report["checks"]:
        assert set(check) == {"name", "status", "detail", "advice"}
        assert check["status"] in ("ok", "warn", "fail")
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["checkpoint"]["status"] == "warn"  # none configured
    assert all(c["status"] == "ok" for name, c in by_name.items() if name != "checkpoint")
    assert "equal to a replay" in by_name["projection_drift"]["detail"]
    # Byte-identical, same mtimes, and no -wal/-shm/-journal or lock file appeared.
    assert snapshot(store.parent) == before
    plain = run_cli("--store", str(store), "doctor", cwd=store.parent)
    assert plain.returncode == 0 and plain.stdout.strip().endswith("ok")
    assert snapshot(store.parent) == before


def test_doctor_reads_alongside_a_live_writer(store: Path) -> None:
    """With a writer connection open (its -wal/-shm exist), doctor shares them read-only."""
    writer = SQLiteStore(store)
    try:
        assert Path(f"{store}-wal").exists()
        main = hashlib.sha256(store.read_bytes()).hexdigest()
        report = doctor(str(store))
        assert report.ok, report
        assert hashlib.sha256(store.read_bytes()).hexdigest() == main
    finally:
        writer.close()


def _troubled(path: Path) -> tuple[SchedulerService, ManualClock]:
    """Held by a budget and by a crash loop, a retry timer, running and waiting Work."""
    clock = ManualClock(datetime(2026, 7, 1, tzinfo=UTC))
    settings = Settings(concurrency=3, lease_seconds=60, timeout_seconds=3000, crash_loop_limit=1)
    binding = Binding(name="b", executor="x", retry=RetryPolicy(max_attempts=3, delays=(10, 10)))
    service = SchedulerService(
        SQLiteStore(path, clock=clock),
        settings=settings,
        owner="t",
        bindings={"b": binding},
        registrations={"x": Registration(name="x")},
    )
    service.admission.configure_budgets([Budget(id="usd", unit="usd", max=1, per="work")])

    def current(work: str) -> tuple[str, int]:
        attempt = service.projection.works[work].current
        assert attempt is not None
        return attempt.execution_id, attempt.epoch

    service.lifecycle.submit(
        SubmitWork(work_id="spend", binding="b", kind="standing", inputs=(WorkInput(1, "i1"),))
    )
    service.lifecycle.submit(
        SubmitWork(work_id="late", binding="b", inputs=(WorkInput(None, "s"),))
    )
    service.lifecycle.submit(
        SubmitWork(work_id="loop", binding="b", inputs=(WorkInput(None, "s"),))
    )
    service.lifecycle.start_pass(8)
    service.lifecycle.invoke(*current("spend"))
    service.lifecycle.finish(*current("spend"), Result(usage={"usd": 2.0}))
    service.lifecycle.invoke(*current("late"))
    service.lifecycle.finish(*current("late"), Result(outcome="failed", error_code="boom"))
    service.admission.settle_pass()
    service.lifecycle.accept("spend", 2, key="i2")
    service.lifecycle.start_pass(8)  # spend: over budget, held
    for _ in range(2):  # loop never invokes: relaunched once, then held (crash loop)
        clock.advance(61)
        service.recovery.recovery_pass()
    for work in ("stuck", "wait0", "wait1", "wait2"):
        service.lifecycle.submit(
            SubmitWork(work_id=work, binding="b", inputs=(WorkInput(None, "s"),))
        )
    service.lifecycle.start_pass(8)
    service.lifecycle.invoke(*current("stuck"))
    clock.advance(200)
    return service, clock


def test_scheduler_troubles_are_warnings_with_advice(tmp_path: Path) -> None:
    service, clock = _troubled(tmp_path / "rota.db")
    service.store.close()
    report = doctor(str(tmp_path / "rota.db"), clock=clock, settings=service.settings)
    checks = {c.name: c for c in report.checks}
    assert report.ok  # warnings only
    assert checks["expired_leases"].status == "warn"
    assert "stuck/1" in checks["expired_leases"].detail
    # It names the generation and executor the attempt is pinned to (historical executors).
    stuck = service.projection.works["stuck"].current
    assert stuck is not None and f"generation {stuck.pinned.generation}" in (
        checks["expired_leases"].detail
    )
    assert "register_historical" in checks["expired_leases"].advice
    assert "loop" not in checks["expired_leases"].detail  # held: not recovery's to take
    assert checks["overdue_timers"].status == "warn" and "late" in checks["overdue_timers"].detail
    assert checks["budgets"].status == "warn" and "spend: budget usd" in checks["budgets"].detail
    assert checks["crash_loop"].status == "warn" and "loop" in checks["crash_loop"].detail
    assert "rota release WORK" in checks["crash_loop"].advice
    assert "agents 3/3 running, 2 held back" in checks["capacity"].detail
    assert "wait1" in checks["capacity"].detail and checks["capacity"].status == "ok"
    for name in ("expired_leases", "overdue_timers", "budgets", "crash_loop"):
        assert checks[name].advice


def test_an_unbounded_pool_is_never_over_its_limit(tmp_path: Path) -> None:
    service, clock = _troubled(tmp_path / "rota.db")
    service.store.close()
    settings = Settings(concurrency=0)
    report = doctor(str(tmp_path / "rota.db"), clock=clock, settings=settings)
    capacity = report.check("capacity")
    assert capacity.status == "ok" and "agents 3/unbounded running" in capacity.detail


def test_a_lagging_projection_warns(store: Path) -> None:
    with rota.open(store, config={}, projections=False) as scheduler:  # the file falls behind
        scheduler.register("more", lambda ctx: None)
        for n in range(5):
            scheduler.submit(f"more-{n}", binding="more")
        scheduler.run_until_idle(timeout=60)
    report = doctor(str(store), lag_threshold=5)
    lag = report.check("projection_lag")
    assert lag.status == "warn" and "rota replay rebuild" in lag.advice
    assert report.check("projection_drift").status == "ok"  # equal at its own position


def test_a_log_behind_its_checkpoint_fails(store: Path, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    with SQLiteStore(store) as log:
        Checkpointer(log, checkpoints).write()
        head = log.head().position
        log.write(
            lambda cursor: cursor.execute("DELETE FROM events WHERE position > ?", (head - 3,))
        )
    report = doctor(str(store), checkpoint_dir=checkpoints)
    checkpoint = report.check("checkpoint")
    assert not report.ok and checkpoint.status == "fail"
    assert "log_behind_checkpoint" in checkpoint.detail
    assert "restore a full backup" in checkpoint.advice
    assert statuses(report)["hash_chain"] == "ok"  # a cut tail is a valid chain


def test_an_edited_log_fails_the_hash_chain(store: Path) -> None:
    with SQLiteStore(store) as log:
        log.write(
            lambda cursor: cursor.execute(
                "UPDATE events SET recorded_at = '2001-01-01T00:00:00.000000Z' WHERE position = 9"
            )
        )
    report = doctor(str(store))
    assert statuses(report)["hash_chain"] == "fail"
    assert "first bad position 9" in report.check("hash_chain").detail
    assert "do not run recover-corrupt" in report.check("hash_chain").advice


def test_a_damaged_log_page_fails_log_integrity(store: Path, seed: int) -> None:
    overwrite_page(store, random.Random(seed))
    report = doctor(str(store))
    assert not report.ok
    assert statuses(report)["log_integrity"] == "fail"


@pytest.mark.parametrize("damage", ["bits", "page"])
def test_a_damaged_projection_file_fails_a_projection_check(
    store: Path, seed: int, damage: str
) -> None:
    rng = random.Random(seed)
    projections = Path(f"{store}.projections")
    if damage == "bits":
        flip_bits(projections, rng, 1)
    else:
        overwrite_page(projections, rng)
    before = snapshot(store.parent)
    done = run_cli("--store", str(store), "doctor", "--json", cwd=store.parent)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    found = {c["name"]: c for c in report["checks"]}
    assert not report["ok"]
    assert {found[n]["status"] for n in LOG_CHECKS} <= {"ok", "warn"}
    failed = [
        n for n in ("projection_integrity", "projection_drift") if found[n]["status"] == "fail"
    ]
    assert failed, found
    assert "rota recover-corrupt --backup-name" in found[failed[0]]["advice"]
    assert snapshot(store.parent) == before


def test_a_missing_log_is_reported_not_created(tmp_path: Path) -> None:
    report = doctor(str(tmp_path / "absent.db"))
    assert not report.ok and report.checks[0].status == "fail"
    assert list(tmp_path.iterdir()) == []


def test_a_writer_opening_during_an_immutable_read_makes_doctor_read_again(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rota.replay import doctor as module

    real, seen = module.examine, []
    writer: list[SQLiteStore] = []

    def examine(log: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["immutable"])
        report = real(log, *args, **kwargs)
        if not writer:  # a scheduler starts while doctor reads
            writer.append(SQLiteStore(store))
            writer[0].write(lambda cursor: cursor.execute("SELECT 1"))
        return report

    monkeypatch.setattr(module, "examine", examine)
    try:
        report = doctor(str(store))
    finally:
        writer[0].close()
    assert seen == [True, False] and report.ok
