"""`rota recover-corrupt`: corruption trials (bit flips and overwritten pages in the
projection file), the guarded steps and their refusals (backup-name corpus, daemon lock,
damaged log, PostgreSQL), and that the log is never written."""

from __future__ import annotations

import errno
import json
import random
import subprocess
import sys
from pathlib import Path

import apsw
import msgspec
import pytest
from trial_scale import scale

from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import PERSISTED
from rota.replay import recover_corrupt as rc
from rota.replay.daemon_lock import DaemonLock, StoreBusy, held_by_another
from rota.replay.doctor import doctor
from rota.replay.rebuild import fold
from rota.replay.recover_corrupt import recover_corrupt
from rota.replay.recovery_report import RecoveryRefused

from .test_doctor import (
    LOG_CHECKS,
    build_store,
    copy_store,
    flip_bits,
    log_facts,
    overwrite_page,
    run_cli,
    snapshot,
    statuses,
)

BIT_TRIALS = scale(50, 200, "ROTA_BIT_TRIALS")
PAGE_TRIALS = scale(50, 200, "ROTA_PAGE_TRIALS")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("template"))


def replay_digests(log_path: Path) -> dict[str, str]:
    with SQLiteStore(log_path) as log:
        fresh = [kind() for kind in PERSISTED]
        fold(log, fresh)
        return {p.name: p.digest() for p in fresh}


def stored_digests(projections: Path, log_path: Path) -> dict[str, str]:
    with SQLiteStore(log_path) as log, SQLiteProjectionStore(projections) as store:
        scheduler, history = store.load_scheduler(log), store.load_history(log)
        assert scheduler is not None and history is not None, store.last_refusal
        return {"scheduler": scheduler.digest(), "history": history.digest()}


def trial(store: Path, name: str, expect: str) -> None:
    """Doctor fails the `expect`ed projection check and no log check; recover-corrupt
    restores; the log is byte-identical with the same events and delivery identities."""
    projections = Path(f"{store}.projections")
    damaged = projections.read_bytes()
    facts = log_facts(store)
    found = doctor(str(store))
    checks = statuses(found)
    assert not found.ok
    assert {checks[n] for n in LOG_CHECKS} <= {"ok", "warn"}, found
    assert checks[expect] == "fail", found
    print(name, "doctor fails:", [c.name for c in found.checks if c.status == "fail"])

    report = recover_corrupt(str(store), name)
    assert report.verified and report.rebuilt is not None
    assert report.log_head_before == report.log_head_after == facts[1]
    backup = store.parent / "diagnostics" / "scheduler-recovery" / name
    assert Path(report.backup) == backup
    assert (backup / projections.name).read_bytes() == damaged  # isolated byte for byte
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["files"] == msgspec.to_builtins(report.files)
    assert manifest["files"][-1]["size"] == len(damaged)

    assert log_facts(store) == facts  # the log: same bytes, events, delivery identities
    digests = replay_digests(store)
    assert report.rebuilt.digests == digests
    assert stored_digests(projections, store) == digests
    after = doctor(str(store))
    assert after.ok, after
    assert statuses(after)["projection_drift"] == "ok"


def test_bit_flips_in_projection_rows(template: Path, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    for number in range(BIT_TRIALS):
        store = copy_store(template, tmp_path / f"bits-{number}")
        flip_bits(Path(f"{store}.projections"), rng, rng.randint(1, 3))
        # A flipped bit in a row's value is invisible to SQLite: only the replay sees it.
        trial(store, f"bits-{number}", "projection_drift")


def test_overwritten_pages_in_the_projection_file(
    template: Path, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    for number in range(PAGE_TRIALS):
        store = copy_store(template, tmp_path / f"page-{number}")
        overwrite_page(Path(f"{store}.projections"), rng)
        trial(store, f"page-{number}", "projection_integrity")


def test_the_cli_recovers_and_prints_what_it_did(template: Path, tmp_path: Path) -> None:
    store = copy_store(template, tmp_path / "store")
    overwrite_page(Path(f"{store}.projections"), random.Random(7))
    before = snapshot(store.parent)
    dry = run_cli("--store", str(store), "recover-corrupt", "--backup-name", "x", "--dry-run",
                  cwd=store.parent)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing was changed" in dry.stdout and "rota.db.projections" in dry.stdout
    assert snapshot(store.parent) == before
    done = run_cli("--store", str(store), "recover-corrupt", "--backup-name", "x", "--json",
                   cwd=store.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verified"] is True and report["appended"] == 0
    assert report["files"][0]["name"] == "rota.db.projections"
    assert Path(report["manifest"]).is_file()
    checked = run_cli("--store", str(store), "doctor", cwd=store.parent)
    assert checked.returncode == 0, checked.stdout


# -- refusals: each before anything on disk changes ------------------------------------------

CORPUS = ["../x", "/etc", "a/b", ".", "..", "", "a" * 300, "-x", "x\n", "é"]


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    return copy_store(template, tmp_path / "store")


@pytest.mark.parametrize("name", CORPUS)
def test_bad_backup_names_are_refused_by_the_cli(store: Path, name: str) -> None:
    before = snapshot(store.parent)
    done = run_cli("--store", str(store), "recover-corrupt", f"--backup-name={name}",
                   cwd=store.parent)  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("rota: invalid_backup_name: ")
    assert done.stderr.count("\n") == 1  # one line
    assert snapshot(store.parent) == before


def test_a_name_with_nul_is_refused(store: Path) -> None:
    before = snapshot(store.parent)
    with pytest.raises(RecoveryRefused) as refused:
        recover_corrupt(str(store), "a\x00b")
    assert refused.value.code == "invalid_backup_name" and "\n" not in str(refused.value)
    assert snapshot(store.parent) == before


def _planted(store: Path, tmp_path: Path, kind: str) -> str:
    """Plant an existing name, a symlink at the target, or a symlinked parent."""
    recovery = store.parent / "diagnostics" / "scheduler-recovery"
    outside = tmp_path / "outside"
    outside.mkdir()
    if kind == "symlinked-parent":
        (store.parent / "diagnostics").symlink_to(outside, target_is_directory=True)
        return "fresh"
    recovery.mkdir(parents=True)
    if kind == "existing":
        (recovery / "taken").mkdir()
        (recovery / "taken" / "keep.txt").write_text("earlier recovery")
        return "taken"
    if kind == "symlink":
        (recovery / "link").symlink_to(outside, target_is_directory=True)
        return "link"
    (recovery / "dangling").symlink_to(tmp_path / "nowhere")
    return "dangling"


@pytest.mark.parametrize("kind", ["existing", "symlink", "dangling", "symlinked-parent"])
@pytest.mark.parametrize("dry_run", [False, True])
def test_an_existing_name_or_a_planted_symlink_is_refused(
    store: Path, tmp_path: Path, kind: str, dry_run: bool
) -> None:
    name = _planted(store, tmp_path, kind)
    before, outside = snapshot(store.parent), snapshot(tmp_path / "outside")
    args = ["--store", str(store), "recover-corrupt", "--backup-name", name]
    done = run_cli(*args, *(["--dry-run"] if dry_run else []), cwd=store.parent)
    assert done.returncode == 1
    code = "unsafe_path" if kind == "symlinked-parent" else "backup_exists"
    assert done.stderr.startswith(f"rota: {code}: ") and done.stderr.count("\n") == 1
    assert snapshot(store.parent) == before
    assert snapshot(tmp_path / "outside") == outside == {}


def test_the_target_directory_is_created_exclusively(store: Path, tmp_path: Path) -> None:
    """A name planted between the checks and the mkdir is still refused (mkdir is the
    authority), and nothing is moved."""
    projections = Path(f"{store}.projections").read_bytes()
    from rota.infrastructure.sqlite import isolation

    real = isolation.precheck_target

    def racing(base: Path, name: str) -> Path:
        found = real(base, name)
        found.parent.mkdir(parents=True, exist_ok=True)
        found.symlink_to(tmp_path, target_is_directory=True)
        return found

    isolation.precheck_target = racing  # type: ignore[assignment]
    try:
        with pytest.raises(RecoveryRefused) as refused:
            recover_corrupt(str(store), "raced", force=True)
    finally:
        isolation.precheck_target = real  # type: ignore[assignment]
    assert refused.value.code == "backup_exists"
    assert Path(f"{store}.projections").read_bytes() == projections


HOLDER = """
import sys
kind, path = sys.argv[1], sys.argv[2]
if kind == "daemon":  # exactly what `rota run` takes: `with daemon_lock(args), ...`
    from rota.cli import build_parser
    from rota.cli.ops import daemon_lock
    lock = daemon_lock(build_parser().parse_args(["--store", path, "run"])).acquire()
else:  # an embedded scheduler: it keeps the projection file (and holds its lock)
    import rota
    scheduler = rota.open(path, config={})
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("kind", ["daemon", "embedded scheduler"])
def test_refused_while_a_daemon_holds_the_store(store: Path, kind: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-P", "-c", HOLDER, kind.split(maxsplit=1)[0], str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = snapshot(store.parent)
        for dry in ([], ["--dry-run"]):
            done = run_cli("--store", str(store), "recover-corrupt", "--backup-name", "n", *dry,
                           cwd=store.parent)  # fmt: skip
            assert done.returncode == 1
            assert done.stderr.startswith("rota: store_busy: ") and done.stderr.count("\n") == 1
        assert snapshot(store.parent) == before
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert recover_corrupt(str(store), "n", force=True).verified  # the daemon is gone


def test_the_daemon_lock_is_shared_by_daemons_and_excludes_recovery(tmp_path: Path) -> None:
    lock = tmp_path / "rota.db.lock"
    assert not held_by_another(lock) and not lock.exists()  # probing creates nothing
    with DaemonLock(lock), DaemonLock(lock):  # two daemons (racing schedulers) share it
        assert held_by_another(lock)
        with pytest.raises(StoreBusy):
            DaemonLock(lock, exclusive=True).acquire()
    with DaemonLock(lock, exclusive=True):
        with pytest.raises(StoreBusy) as busy:
            DaemonLock(lock).acquire()  # a daemon does not start during a recovery
        assert "recover-corrupt" in str(busy.value)
    assert not held_by_another(lock)
    assert DaemonLock.for_store("postgresql://h/db").acquire().path is None


@pytest.mark.parametrize("damage", ["chain", "page", "behind checkpoint"])
def test_a_damaged_log_is_refused_with_full_restore_advice(
    store: Path, tmp_path: Path, damage: str
) -> None:
    checkpoints = None
    if damage == "page":
        overwrite_page(store, random.Random(3))
    else:
        with SQLiteStore(store) as log:
            if damage == "chain":
                sql = "UPDATE events SET recorded_at = '2001-01-01T00:00:00Z' WHERE position = 5"
                log.write(lambda cursor: cursor.execute(sql))
            else:
                from rota.replay.checkpoint import Checkpointer

                checkpoints = tmp_path / "checkpoints"
                Checkpointer(log, checkpoints).write()
                log.write(lambda cursor: cursor.execute("DELETE FROM events WHERE position > 10"))
    before = snapshot(store.parent)
    for dry_run in (True, False):
        with pytest.raises(RecoveryRefused) as refused:
            recover_corrupt(str(store), "n", checkpoint_dir=checkpoints, dry_run=dry_run)
        assert refused.value.code == "log_corrupt"
        assert "restore a full backup" in str(refused.value)
    assert snapshot(store.parent) == before


def test_a_projection_file_for_postgresql_and_missing_files_are_refused(
    store: Path, tmp_path: Path
) -> None:
    with pytest.raises(RecoveryRefused) as refused:  # before connecting to anything
        recover_corrupt("postgresql://localhost/rota", "n", projections=tmp_path / "p")
    assert refused.value.code == "not_sqlite"
    with pytest.raises(RecoveryRefused) as refused:
        recover_corrupt(str(tmp_path / "absent.db"), "n")
    assert refused.value.code == "no_store"
    Path(f"{store}.projections").unlink()
    before = snapshot(store.parent)
    with pytest.raises(RecoveryRefused) as refused:
        recover_corrupt(str(store), "n")
    assert refused.value.code == "no_projection_store"
    assert snapshot(store.parent) == before


def test_companions_move_too_and_across_file_systems_by_copy(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open projection store leaves -wal/-shm: they move (first) with the file; when
    rename cannot cross devices the files are copied, fsynced, compared, then unlinked."""
    projections = Path(f"{store}.projections")
    companions = [Path(f"{projections}{s}") for s in ("-wal", "-shm")]
    keeper = apsw.Connection(str(projections))
    keeper.execute("PRAGMA wal_autocheckpoint=0")
    keeper.execute("UPDATE projection_meta SET saved_at = saved_at")
    originals = {p.name: p.read_bytes() for p in [*companions, projections]}
    keeper.close()  # checkpoints and removes -wal/-shm: put them back as a crash leaves them
    for p in [*companions, projections]:
        p.write_bytes(originals[p.name])

    def no_rename(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(rc.os, "rename", no_rename)
    report = recover_corrupt(str(store), "copied", force=True)  # (a healthy file)
    assert [f.name for f in report.files] == [p.name for p in companions] + [projections.name]
    backup = Path(report.backup)
    for name, data in originals.items():
        assert (backup / name).read_bytes() == data
    assert report.verified
    assert doctor(str(store)).ok


# -- a healthy projection store: refused unless --force --------------------------------------


def test_projections_doctor_finds_healthy_are_refused_unless_forced(store: Path) -> None:
    assert doctor(str(store)).ok  # the copied template is sound
    before = snapshot(store.parent)
    for dry_run in (True, False):
        with pytest.raises(RecoveryRefused) as refused:
            recover_corrupt(str(store), "n", dry_run=dry_run)
        assert refused.value.code == "projection_healthy"
        message = str(refused.value)
        assert "projection_integrity ok" in message and "projection_drift ok" in message
        assert "--force" in message and "\n" not in message
    assert snapshot(store.parent) == before  # nothing moved, nothing created
    done = run_cli("--store", str(store), "recover-corrupt", "--backup-name", "n",
                   cwd=store.parent)  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("rota: projection_healthy: ") and done.stderr.count("\n") == 1
    assert snapshot(store.parent) == before

    dry = recover_corrupt(str(store), "n", dry_run=True, force=True)
    assert dry.forced and snapshot(store.parent) == before
    assert any("--force" in line for line in dry.lines())
    done = run_cli("--store", str(store), "recover-corrupt", "--backup-name", "n", "--force",
                   "--json", cwd=store.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["forced"] is True and report["verified"] is True
    assert [line.split(":")[0] for line in report["projection_health"]] == [
        "projection_integrity ok",
        "projection_drift ok",
    ]
    assert doctor(str(store)).ok


def test_a_damaged_store_needs_no_force_and_says_what_doctor_found(
    template: Path, tmp_path: Path
) -> None:
    store = copy_store(template, tmp_path / "damaged")
    overwrite_page(Path(f"{store}.projections"), random.Random(11))
    report = recover_corrupt(str(store), "n", dry_run=True)
    assert not report.forced
    assert any(line.startswith("projection_integrity fail") for line in report.projection_health)
