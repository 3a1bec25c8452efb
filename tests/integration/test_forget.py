"""Forgetting personal data on SQLite (issue 31 item 4, "Must show"): a canary in a Work's
personal field reaches its job; after `rota forget` the Work's key is gone from every file of
the store (the log file with its free pages, its WAL, the projection files), from an export
and from backups taken afterwards, the canary was never anywhere in the clear, the chain
still verifies, and no log line or error shows either."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

import rota
from rota.application.errors import PortCode
from rota.application.personal import context
from rota.domain.errors import DomainCode, RotaError
from rota.domain.events import accepted_input
from rota.domain.personal import MARKER
from rota.infrastructure.personal_cipher import AesGcmCipher
from rota.infrastructure.personal_keys import SQLiteKeys
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.audit import verify_chain
from rota.replay.export import export_to_file

CANARY = "canary-7be2c0d1-ada@example.org"
TIMEOUT = 60


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    """Every file under `root` whose raw bytes hold one of `needles` (and which)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {needle!r}" for needle in needles if needle in data]
    return found


def _needles(key: bytes) -> list[bytes]:
    return [CANARY.encode(), key, key.hex().encode(), key.hex().upper().encode()]


def _rota(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ROTA_STORE"}
    env["TMPDIR"] = str(cwd / "tmp")  # the shell jobs' run directories: scanned too
    (cwd / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _backup(db: Path, target: Path) -> None:
    """SQLite's online backup API (what `sqlite3 .backup` does) of `db` into `target`."""
    target.parent.mkdir(exist_ok=True)
    into, source = apsw.Connection(str(target)), apsw.Connection(str(db))
    with into.backup("main", source, "main") as copying:
        copying.step()
    into.close()
    source.close()


def _recovered(backup: Path) -> str | None:
    """W's personal field read back from a backup alone (its key table and its log), or
    None when the backup cannot give it."""
    conn = apsw.Connection(str(backup), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT key FROM rota_personal_keys WHERE work_id = 'W' AND key IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    if not rows:
        return None
    store = SQLiteStore(backup, create=False)
    try:
        # (its first input: carried by its definition, read as the separate input it is)
        accepted = [
            found
            for r in store.read(0, 10_000)
            if (found := accepted_input(r.event)) is not None and found.work_id == "W"
        ]
    finally:
        store.close()
    token = accepted[0].payload["to"]["email"][MARKER]
    plain = AesGcmCipher().open(bytes(rows[0][0]), context("W", "to.email"), token)
    return str(json.loads(plain))


def _key(scheduler: rota.Scheduler, work_id: str) -> bytes | None:
    store = scheduler.store
    assert isinstance(store, SQLiteStore)
    return SQLiteKeys(store).get(work_id)


def test_after_forget_the_canary_and_its_key_are_in_no_file_export_or_backup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    home = tmp_path / "store"
    home.mkdir()
    db = home / "app.db"
    seen: list[Any] = []
    with rota.open(db, config={}) as scheduler:
        scheduler.register("mail", lambda ctx: seen.append(ctx.trigger) or {"sent": True})
        store = scheduler.store
        assert isinstance(store, SQLiteStore)
        for n in range(100):  # others' keys around it, over several pages of the key table:
            SQLiteKeys(store).create(f"pad-{n:04}")  # page splits move cells, free pages
        for n in range(5):
            scheduler.submit(
                f"other-{n}", binding="mail", input={"email": f"o{n}"}, personal=["email"]
            )
        handle = scheduler.submit(
            "W", binding="mail", input={"to": {"email": CANARY}, "n": 1}, personal=["to.email"]
        )
        for n in range(100, 400):  # (after W's key: the splits move it around)
            SQLiteKeys(store).create(f"pad-{n:04}")
        scheduler.run_until_idle()
        assert handle.result() == {"sent": True}
        assert {"to": {"email": CANARY}, "n": 1} in seen  # the job saw the plaintext
        key = _key(scheduler, "W")
        assert key is not None
        # Before the forget the key is on disk (so the scan below can see it), never the canary.
        scheduler.store.write(lambda cursor: cursor.execute("SELECT 1"))  # (a commit: WAL)
        held = _files_holding(home, _needles(key))
        assert held and not any(CANARY in line for line in held), held
        _backup(db, tmp_path / "before" / "backup.db")  # a backup taken before the forget
        position = scheduler.forget("W", by="dpo", reason="erasure request 17")
        assert scheduler.forget("W", by="dpo") == position  # idempotent: the first record
        assert _key(scheduler, "W") is None and _key(scheduler, "other-3") is not None
        # While the store is open (its WAL in use, not removed by a last close) too:
        assert _files_holding(home, _needles(key)) == []
    assert _files_holding(home, _needles(key)) == []  # .db incl. free pages, -wal, projections

    after = tmp_path / "after"  # what is taken after the forget: export, backups, a copy
    after.mkdir()
    exported = after / "export.jsonl"
    with rota.open(db, config={}) as scheduler:
        export_to_file(scheduler.store, exported)
        forgotten = [
            json.loads(line)
            for line in exported.read_text().splitlines()[1:]
            if '"core.work.forgotten"' in line
        ]
        assert len(forgotten) == 1 and json.loads(forgotten[0]["data"]) == {
            "type": "core.work.forgotten",
            "work_id": "W",
            "by": "dpo",
            "reason": "erasure request 17",
        }
        _backup(db, after / "backup.db")  # SQLite's online backup, the store open
    shutil.copytree(home, after / "copy")  # a plain copy of the store's directory
    assert _files_holding(after, _needles(key)) == []
    assert _recovered(after / "backup.db") is None
    # The backup taken before the forget still opens the value (expire backups): the scan
    # and the reading above would have found it.
    assert _recovered(tmp_path / "before" / "backup.db") == CANARY

    report = verify_chain(SQLiteStore(db))
    assert report.ok, report
    verified = _rota(tmp_path, "--store", str(db), "audit", "verify")
    assert verified.returncode == 0, verified.stderr
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert CANARY not in logged and key.hex() not in logged


def test_a_forgotten_work_fails_its_pending_input_and_takes_no_more_personal_input(
    tmp_path: Path,
) -> None:
    ran: list[Any] = []
    with rota.open(tmp_path / "app.db", config={}) as scheduler:
        scheduler.register("mail", lambda ctx: ran.append(ctx.trigger))
        scheduler.submit("W", binding="mail", input={"email": CANARY}, personal=["email"])
        scheduler.submit("W", binding="mail", input={"email": CANARY}, personal=["email"])
        assert len(scheduler.work("W").pending) == 1  # a retried submit: the same sealed event
        scheduler.forget("W", reason="before it ran")
        scheduler.run_until_idle()
        view = scheduler.work("W")
        assert ran == [] and view.state == "failed"
        error = view.attempts[-1].error
        assert error is not None and error.code == "input_forgotten" and view.attempts[-1].permanent
        assert CANARY not in error.message
        with pytest.raises(RotaError) as refused:
            scheduler.accept("W", {"email": CANARY}, personal=["email"])
        assert refused.value.code in (PortCode.PERSONAL_FORGOTTEN, DomainCode.WORK_TERMINAL)
        with pytest.raises(RotaError) as unknown:
            scheduler.forget("nobody")
        assert unknown.value.code == DomainCode.UNKNOWN_WORK
        with pytest.raises(RotaError) as not_object:
            scheduler.submit("X", binding="mail", input=[CANARY], personal=["email"])
        assert not_object.value.code == DomainCode.INVALID_PERSONAL
        assert CANARY not in str(not_object.value)


def test_a_standing_work_refuses_personal_input_once_forgotten(tmp_path: Path) -> None:
    with rota.open(tmp_path / "app.db", config={}) as scheduler:
        scheduler.register("mail", lambda ctx: None)
        scheduler.submit("S", binding="mail", kind="standing")
        scheduler.accept("S", {"email": CANARY}, personal=["email"])
        scheduler.forget("S")
        with pytest.raises(RotaError) as refused:
            scheduler.accept("S", {"email": "again"}, personal=["email"])
        assert refused.value.code == PortCode.PERSONAL_FORGOTTEN
        scheduler.accept("S", {"plain": 1})  # input without personal fields is still taken


def test_binding_personal_fields_reach_a_shell_job_and_leave_no_run_file(tmp_path: Path) -> None:
    """`[[bindings]] personal = [...]` in rota.toml, `rota submit`, `rota run`, `rota forget`."""
    (tmp_path / "rota.toml").write_text(
        '[[bindings]]\nname = "mail"\nexecutor = "shell"\npersonal = ["email"]\n'
        # (the command is pinned into the log: it names a part of the canary, not all of it)
        'command = ["sh", "-c", '
        '"case \\"$ROTA_INPUT\\" in *-ada@example.org*) ;; *) exit 3;; esac"]\n'
    )
    submitted = _rota(tmp_path, "submit", "W", "--binding", "mail", "--input",
                      json.dumps({"email": CANARY}), "--json")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    assert CANARY not in submitted.stdout
    run = _rota(tmp_path, "run", "--until-idle", "--json")
    assert run.returncode == 0, run.stderr
    shown = json.loads(_rota(tmp_path, "work", "show", "W", "--json").stdout)
    assert shown["state"] == "completed", shown
    events = _rota(tmp_path, "events", "--json")
    assert events.returncode == 0 and '"$personal"' in events.stdout
    assert CANARY not in events.stdout
    # (W's input: carried by its definition, the row that holds the input's identity)
    inputs = json.loads(events.stdout)
    accepted = [e for e in inputs if (e["delivery_id"] or "").startswith("input/W/")]
    ok = _rota(tmp_path, "audit", "keygen", "--out", "audit.key")
    assert ok.returncode == 0, ok.stderr
    signed = ("--dir", "checkpoints", "--key", "audit.key")
    assert _rota(tmp_path, "audit", "checkpoint", *signed).returncode == 0
    forgot = _rota(tmp_path, "forget", "W", "--reason", "ticket 9", "--json")
    assert forgot.returncode == 0, forgot.stderr
    again = _rota(tmp_path, "forget", "W", "--json")
    assert json.loads(again.stdout)["position"] == json.loads(forgot.stdout)["position"]
    shown_text = _rota(tmp_path, "work", "show", "W").stdout
    assert "personal data forgotten by operator at " in shown_text and ": ticket 9" in shown_text
    assert _files_holding(tmp_path, [CANARY.encode()]) == []
    assert _rota(tmp_path, "audit", "verify").returncode == 0
    # The chain and the Merkle proofs are untouched by the forget: the sealed input's
    # inclusion, and the log after the forget extending the one before, verify standalone.
    assert _rota(tmp_path, "audit", "checkpoint", *signed).returncode == 0
    before, after = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if "note" in p.name)
    position = str(accepted[0]["position"])
    for kind, args in (
        ("inclusion", ("prove", position, "--dir", "checkpoints")),
        ("consistency", ("consistency", f"checkpoints/{before}", f"checkpoints/{after}")),
    ):
        proof = _rota(tmp_path, "audit", *args, "--json")
        assert proof.returncode == 0, proof.stderr
        (tmp_path / f"{kind}.json").write_text(proof.stdout)
        checked = subprocess.run(
            [sys.executable, "-P", "-m", "rota.verify", kind, f"{kind}.json", "--key",
             "audit.key.pub"],
            cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_async_facade_accepts_personal_input_and_forgets(tmp_path: Path) -> None:
    import asyncio

    import rota.aio

    seen: list[Any] = []

    async def main() -> None:
        async with await rota.aio.open(tmp_path / "app.db", config={}) as scheduler:
            scheduler.register("mail", lambda ctx: seen.append(ctx.trigger))
            await scheduler.submit("S", binding="mail", kind="standing")
            await scheduler.accept("S", {"email": CANARY}, personal=["email"])
            await asyncio.to_thread(scheduler.sync.run_until_idle)
            first = await scheduler.forget("S", reason="async")
            assert await scheduler.forget("S") == first

    asyncio.run(main())
    assert seen == [{"email": CANARY}]


def test_a_work_that_sealed_nothing_gets_marker_like_data_as_given(tmp_path: Path) -> None:
    ran: list[Any] = []
    with rota.open(tmp_path / "app.db", config={}) as scheduler:
        scheduler.register("echo", lambda ctx: ran.append(ctx.trigger))
        scheduler.submit("U", binding="echo", input={"note": {"$personal": "theirs"}})
        scheduler.run_until_idle()
        assert scheduler.work("U").state == "completed"
    assert ran == [{"note": {"$personal": "theirs"}}]


def test_a_schedule_input_cannot_hold_a_field_its_binding_marks_personal(tmp_path: Path) -> None:
    config = {
        "bindings": [
            {"name": "mail", "executor": "shell", "command": ["true"], "personal": ["email"]}
        ]
    }
    with rota.open(tmp_path / "app.db", config=config) as scheduler:
        with pytest.raises(RotaError) as refused:
            scheduler.schedule("s", binding="mail", every="1h", input={"email": CANARY})
        assert refused.value.code == DomainCode.INVALID_PERSONAL
        assert CANARY not in str(refused.value)
        scheduler.schedule("t", binding="mail", every="1h", input={"list": "weekly"})
        pinned = scheduler.service.pinned_for("mail").binding.config
        assert "personal" not in pinned  # (taken out for the executor; sealed at submit)
    assert CANARY.encode() not in (tmp_path / "app.db").read_bytes()


def test_a_reader_blocking_the_wal_truncation_is_logged_and_forget_again_finishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "app.db"
    store = SQLiteStore(db, busy_timeout=0.2)
    keys = SQLiteKeys(store)
    try:
        key = keys.create("W")
        reader = apsw.Connection(str(db))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM rota_personal_keys").fetchall()  # a snapshot held
        with caplog.at_level(logging.WARNING, logger="rota.personal"):
            assert keys.destroy("W")
        assert keys.last_checkpoint is not None and keys.last_checkpoint[0] == 1
        assert "run rota forget again" in caplog.text and key.hex() not in caplog.text
        assert _files_holding(tmp_path, _needles(key))  # its old page is still in the WAL
        reader.execute("COMMIT")
        reader.close()
        assert not keys.destroy("W")  # (what forgetting again does first)
        assert keys.last_checkpoint == (0, 0, 0)
        assert _files_holding(tmp_path, _needles(key)) == []
    finally:
        store.close()


def test_accept_seals_for_a_work_another_process_submitted(tmp_path: Path) -> None:
    config = {
        "bindings": [
            {"name": "mail", "executor": "shell", "command": ["true"], "personal": ["email"]}
        ]
    }
    with rota.open(tmp_path / "app.db", config=config) as reader:
        reader.work("nothing-yet")  # (its projection is now read, before the submit below)
        with rota.open(tmp_path / "app.db", config=config) as writer:
            writer.submit("S", binding="mail", kind="standing")
        reader.accept("S", {"email": CANARY})  # the binding's mark applies to a Work it
        with pytest.raises(RotaError) as unknown:  # learned of from the log just now
            reader.accept("nobody", {"email": CANARY}, personal=["email"])
        assert unknown.value.code == DomainCode.UNKNOWN_WORK
    assert CANARY.encode() not in (tmp_path / "app.db").read_bytes()
