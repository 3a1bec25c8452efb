"""Audit, checkpoints, export and import, on logs the scheduler really wrote.

Tampering is done behind rota's back with plain SQL (apsw) or by editing export files; the
verifiers must name the first bad position, and a checkpoint kept outside the store must
reveal what the chain alone cannot (a truncated tail, a rewrite with every hash recomputed).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

import rota
from rota.application.errors import StoreError
from rota.application.ports import NewEvent
from rota.domain.events import WorkSubmitted
from rota.infrastructure.chain import GENESIS, GENESIS_HEX, canonical_envelope, link
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay import checkpoint as cp
from rota.replay.audit import iter_raw, verify_chain, verify_extends
from rota.replay.export import (
    ExportError,
    export,
    export_to_file,
    import_export,
    verify_export,
)
from rota.replay.progress import Progress

TIMEOUT = 60
WORKS = 6
ROOT = Path(__file__).resolve().parents[2]


def _greet(ctx: rota.LaunchContext) -> Any:
    name = ctx.trigger["name"]
    if name.endswith("3"):
        raise rota.Fail("no_greeting", "three is unlucky", permanent=True)
    return {"hello": name, "note": 'naïve ünïcode & "quotes"\n'}


def _submitted(work_id: str) -> WorkSubmitted:
    return WorkSubmitted(work_id=work_id, scope="root", binding="b")


def make_log(path: Path, works: int = WORKS, start: int = 0) -> None:
    """A log the scheduler wrote: Work submitted, run, completed or failed."""
    with rota.open(path, config={}) as scheduler:
        scheduler.register("greet", _greet)
        for i in range(start, start + works):
            scheduler.submit(f"w{i}", binding="greet", input={"name": f"n{i}"})
        scheduler.run_until_idle(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "source.db"
    make_log(path)
    return path


@pytest.fixture
def log(source: Path, tmp_path: Path) -> Path:
    """A private copy of the scheduler's log."""
    path = tmp_path / "log.db"
    for file in source.parent.glob(source.name + "*"):
        shutil.copy(file, tmp_path / file.name.replace(source.name, path.name))
    return path


def _sql(path: Path, *statements: str, params: tuple[Any, ...] = ()) -> None:
    conn = apsw.Connection(str(path))
    for statement in statements:
        conn.execute(statement, params)
    conn.close()


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path))
    rows = conn.execute("SELECT * FROM events ORDER BY position").fetchall()
    conn.close()
    return rows


def _rechain(path: Path) -> None:
    """What a careful forger does after an edit: recompute every hash from position 1."""
    conn = apsw.Connection(str(path))
    previous = GENESIS
    rows = conn.execute(
        "SELECT position, stream, version, type, type_version, delivery_id, recorded_at, data "
        "FROM events ORDER BY position"
    ).fetchall()
    for row in rows:
        previous = link(previous, canonical_envelope(*row))
        conn.execute("UPDATE events SET hash = ? WHERE position = ?", (previous.hex(), row[0]))
    conn.close()


def _head(path: Path) -> tuple[int, str]:
    with SQLiteStore(path) as store:
        head = store.head()
    return head.position, head.hash


def test_the_source_log_is_a_real_one(source: Path) -> None:
    with SQLiteStore(source) as store:
        report = verify_chain(store)
        types = {r.type for r in iter_raw(store)}
    assert report.ok and report.checked >= 3 * WORKS  # (three events a job, at the least)
    assert {"core.work.submitted", "core.execution.completed", "core.execution.failed"} <= types


# -- export and offline verification -----------------------------------------------------


def test_export_round_trip_verifies_offline(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "log.jsonl"
    with SQLiteStore(log) as store:
        header = export_to_file(store, out)
        chain = verify_chain(store)
        stored = list(iter_raw(store))
    lines = out.read_bytes().splitlines()
    first = json.loads(lines[0])
    assert first == {
        "rota_export": 1,
        "store_id": header.store_id,
        "from": 0,
        "previous_hash": GENESIS_HEX,
        "head_position": chain.head_position,
        "head_hash": chain.head_hash,
    }
    assert len(lines) == chain.head_position + 1
    one = json.loads(lines[1])
    assert list(one) == [
        "position",
        "stream",
        "version",
        "type",
        "type_version",
        "delivery_id",
        "recorded_at",
        "data",
        "data_encoding",
        "hash",
    ]
    for line, row in zip(lines[1:], stored, strict=True):
        item = json.loads(line)
        assert item["data"] == row.data and item["data_encoding"] == "text"  # exactly as stored
        assert (item["position"], item["hash"]) == (row.position, row.hash)
    report = verify_export(out)
    assert report.ok and report.checked == chain.head_position
    assert (report.head_position, report.head_hash) == (chain.head_position, chain.head_hash)


def test_export_from_n_carries_the_previous_hash(log: Path) -> None:
    buffer = io.BytesIO()
    with SQLiteStore(log) as store:
        head = store.head()
        at_10 = store.read_raw(9, 1)[0].hash
        export(store, buffer, after=10)
    lines = buffer.getvalue().splitlines()
    header = json.loads(lines[0])
    assert (header["from"], header["previous_hash"]) == (10, at_10)
    assert json.loads(lines[1])["position"] == 11 and len(lines) == head.position - 10 + 1
    path = log.with_suffix(".part.jsonl")
    path.write_bytes(buffer.getvalue())
    report = verify_export(path)
    assert report.ok and report.from_position == 10
    assert (report.checked, report.head_hash) == (head.position - 10, head.hash)


def _export_lines(log: Path, tmp_path: Path) -> tuple[Path, list[bytes]]:
    out = tmp_path / "e.jsonl"
    with SQLiteStore(log) as store:
        export_to_file(store, out)
    return out, out.read_bytes().splitlines(keepends=True)


def test_an_edited_export_line_is_reported_at_its_position(log: Path, tmp_path: Path) -> None:
    out, lines = _export_lines(log, tmp_path)
    item = json.loads(lines[7])  # position 7
    assert item["position"] == 7
    item["data"] = item["data"].replace('"', " ", 1) if item["data"] else "x"
    lines[7] = json.dumps(item).encode() + b"\n"
    out.write_bytes(b"".join(lines))
    report = verify_export(out)
    assert not report.ok and report.first_bad_position == 7 and report.checked == 6
    assert "hash does not match" in (report.reason or "")


@pytest.mark.parametrize("damage", ["delete", "insert", "reorder", "cut_tail", "bad_header"])
def test_damaged_export_files_are_reported(log: Path, tmp_path: Path, damage: str) -> None:
    out, lines = _export_lines(log, tmp_path)
    head = len(lines) - 1
    if damage == "delete":
        del lines[5]
        expected = 5
    elif damage == "insert":
        lines.insert(5, lines[9])
        expected = 5
    elif damage == "reorder":
        lines[4], lines[5] = lines[5], lines[4]
        expected = 4
    elif damage == "cut_tail":
        del lines[-2:]
        expected = head - 1
    else:
        header = json.loads(lines[0])
        header["head_hash"] = "0" * 64
        lines[0] = json.dumps(header).encode() + b"\n"
        expected = head
    out.write_bytes(b"".join(lines))
    report = verify_export(out)
    assert not report.ok and report.first_bad_position == expected, report


def test_invalid_json_and_long_lines_are_named_by_line(log: Path, tmp_path: Path) -> None:
    out, lines = _export_lines(log, tmp_path)
    out.write_bytes(b"".join([*lines[:4], b"{not json\n", *lines[5:]]))
    report = verify_export(out)
    assert not report.ok and report.first_bad_position == 4
    assert (report.reason or "").startswith("line 5: not a valid export line")
    out.write_bytes(b"".join([*lines[:3], b'"' + b"x" * (1 << 20) + b'"\n', *lines[4:]]))
    report = verify_export(out)
    assert report.first_bad_position == 3 and "line 4 is longer than 1 MiB" in (report.reason or "")


# -- import ------------------------------------------------------------------------------


def test_import_gives_a_byte_identical_log(log: Path, tmp_path: Path) -> None:
    out, _ = _export_lines(log, tmp_path)
    target = tmp_path / "target.db"
    with SQLiteStore(target) as store:
        report = import_export(out, store, page=7)
        assert store.store_id != json.loads(out.read_bytes().splitlines()[0])["store_id"]
    assert _rows(target) == _rows(log)
    assert (report.head_position, report.head_hash) == _head(log)
    # The imported log goes on: the scheduler appends after it and the chain holds.
    make_log(target, works=2, start=100)
    with SQLiteStore(target) as store:
        after = verify_chain(store)
    assert after.ok and after.head_position > report.head_position


def test_import_refuses_a_non_empty_store(log: Path, tmp_path: Path) -> None:
    out, _ = _export_lines(log, tmp_path)
    target = tmp_path / "busy.db"
    with SQLiteStore(target) as store:
        store.append([NewEvent("work/x", _submitted("x"))])
        with pytest.raises(StoreError) as refused:
            import_export(out, store)
        assert refused.value.code == "store_not_empty"
        assert store.head().position == 1


def test_import_refuses_a_tampered_file_before_writing(log: Path, tmp_path: Path) -> None:
    out, lines = _export_lines(log, tmp_path)
    item = json.loads(lines[-3])
    item["recorded_at"] = "2020-01-01T00:00:00.000000Z"
    lines[-3] = json.dumps(item).encode() + b"\n"
    out.write_bytes(b"".join(lines))
    target = tmp_path / "target.db"
    with SQLiteStore(target) as store:
        with pytest.raises(ExportError) as refused:
            import_export(out, store, page=2)  # the first pages are fine, yet none is written
        assert refused.value.code == "invalid_export"
        assert f"position {item['position']}" in str(refused.value)
        assert store.head().position == 0


def test_append_raw_checks_every_link_and_writes_all_or_nothing(log: Path, tmp_path: Path) -> None:
    with SQLiteStore(log) as source:
        rows = list(iter_raw(source))
    with SQLiteStore(tmp_path / "t.db") as store:
        for bad in (
            rows[1:3],  # does not start at head + 1
            [rows[0], rows[2]],  # a gap
            [*rows[:4], msgspec.structs.replace(rows[4], data=rows[4].data + " ")],  # edited
        ):
            with pytest.raises(StoreError) as refused:
                store.append_raw(bad)
            assert refused.value.code == "import_mismatch"
            assert store.head().position == 0
        store.append_raw(rows[:5])
        store.append_raw(rows[5:])
        assert verify_chain(store).head_hash == rows[-1].hash


# -- checkpoints -------------------------------------------------------------------------


def test_truncation_is_caught_only_against_a_checkpoint(log: Path, tmp_path: Path) -> None:
    with SQLiteStore(log) as store:
        checkpoint = cp.Checkpointer(store, tmp_path / "cps").write()
    head = checkpoint.position
    _sql(log, f"DELETE FROM events WHERE position > {head - 3}")  # a lost WAL tail, say
    with SQLiteStore(log) as store:
        alone = verify_chain(store)
        against = verify_chain(store, checkpoint=cp.latest(tmp_path / "cps"))
        why = verify_extends(store, checkpoint)
    assert alone.ok and alone.head_position == head - 3  # the chain alone cannot tell
    assert not against.ok and against.first_bad_position == head - 2
    assert against.checkpoint_ok is False and against.checkpoint_position == head
    assert f"positions {head - 2}..{head} were truncated or lost" in (against.reason or "")
    assert why == against.reason


def test_rechaining_is_caught_against_a_checkpoint(log: Path, tmp_path: Path) -> None:
    with SQLiteStore(log) as store:
        early = cp.Checkpoint(store.store_id, 3, store.read_raw(2, 1)[0].hash, "2026-01-01T00:00Z")
        cp.write_file(tmp_path / "cps", early)
        last = cp.Checkpointer(store, tmp_path / "cps").write()
    _sql(log, "UPDATE events SET recorded_at = '2020-01-01T00:00:00.000000Z' WHERE position = 5")
    _rechain(log)
    with SQLiteStore(log) as store:
        alone = verify_chain(store)
        against = verify_chain(store, checkpoint=cp.load_all(tmp_path / "cps"))
        assert verify_extends(store, early) is None
    assert alone.ok  # every hash was recomputed: the chain is whole again
    assert not against.ok and against.first_bad_position == last.position
    assert "rewritten and re-chained" in (against.reason or "")
    assert "the checkpoint at position 3 still matches" in (against.reason or "")


def test_a_checkpoint_of_another_store_is_refused(log: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    make_log(other, works=1)
    with SQLiteStore(other) as store:
        foreign = cp.Checkpointer(store, tmp_path / "other-cps").write()
    with SQLiteStore(log) as store:
        report = verify_chain(store, checkpoint=foreign)
        assert "a different store" in (verify_extends(store, foreign) or "")
    assert not report.ok and "a different store" in (report.reason or "")


def test_signed_checkpoints_verify_and_tampering_fails(log: Path, tmp_path: Path) -> None:
    private, public = cp.keygen(tmp_path / "audit.key")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and public.name == "audit.key.pub"
    with SQLiteStore(log) as store:
        written = cp.Checkpointer(store, tmp_path / "cps", key_path=private).write()
    path = tmp_path / "cps" / cp.file_name(written.position, written.store_id)
    key = cp.load_public_key(public)
    loaded = cp.load(path)
    cp.verify_signature(loaded, key)
    assert loaded.key_id == cp.key_id(key) and loaded.signature
    # Swap in another head hash (as if to cover a rewrite): the signature no longer fits.
    forged = msgspec.structs.replace(loaded, head_hash="ab" * 32)
    path.write_bytes(forged.note().encode())
    with pytest.raises(cp.CheckpointError) as bad:
        cp.verify_signature(cp.load(path), key)
    assert bad.value.code == "bad_signature"
    _, other_public = cp.keygen(tmp_path / "other.key")
    with pytest.raises(cp.CheckpointError) as wrong:
        cp.verify_signature(loaded, cp.load_public_key(other_public))
    assert wrong.value.code == "bad_signature" and "not by this key" in str(wrong.value)
    with pytest.raises(cp.CheckpointError) as unsigned:
        cp.verify_signature(msgspec.structs.replace(loaded, signature=None, key_id=None), key)
    assert unsigned.value.code == "unsigned_checkpoint"


def test_checkpointer_cadence_and_refusal_after_loss(log: Path, tmp_path: Path) -> None:
    clock = ManualClock()
    folder = tmp_path / "cps"
    with SQLiteStore(log) as store:
        writer = cp.Checkpointer(store, folder, every_events=3, every_seconds=300, clock=clock)
        first = writer.maybe_write()
        assert first is not None and first.position == store.head().position
        assert writer.maybe_write() is None  # nothing new
        clock.advance(301)
        assert writer.maybe_write() is None  # time passed, but the head did not move
        store.append([NewEvent("work/a", _submitted("a"))])
        assert writer.maybe_write() is not None  # time passed and the head moved
        for name in ("b", "c"):
            store.append([NewEvent(f"work/{name}", _submitted(name))])
            assert writer.maybe_write() is None
        store.append([NewEvent("work/d", _submitted("d"))])
        third = writer.maybe_write()  # 3 events since the last one
        assert third is not None and third.position == first.position + 4
        # A restarted daemon picks the directory up where it was.
        again = cp.Checkpointer(store, folder, every_events=3, clock=clock)
        assert again.maybe_write() is None and again.last == third
        assert [c.position for c in cp.load_all(folder)] == [
            first.position,
            first.position + 1,
            third.position,
        ]
    _sql(log, f"DELETE FROM events WHERE position > {third.position - 2}")
    with SQLiteStore(log) as store, pytest.raises(cp.CheckpointError) as behind:
        cp.Checkpointer(store, folder, clock=clock).maybe_write()
    assert behind.value.code == "log_behind_checkpoint"


def test_signing_without_cryptography_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(sys.modules):
        if name == "cryptography" or name.startswith("cryptography."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(rota.RotaError) as missing:
        cp.keygen(tmp_path / "k")
    assert missing.value.code == "signing_unavailable"
    assert "install rota[signing]" in str(missing.value)


# -- progress ----------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_only_on_a_terminal_without_json() -> None:
    now = [0.0]
    terminal = _Terminal()
    bar = Progress(100, "verify", stream=terminal, clock=lambda: now[0])
    for _ in range(100):
        now[0] += 0.01
        bar.advance()
    bar.close()
    frames = terminal.getvalue().split("\r")[1:]
    assert 5 <= len(frames) <= 12  # throttled to about ten a second
    assert frames[-1] == "verify [" + "#" * 30 + "] 100%  100/100  100/s\n"  # 100 in 1 s
    assert frames[0].endswith("/s  ETA 0:01")  # ~10 of 100 after 0.1 s: a second left
    for quiet in (Progress(100, "x", stream=_Terminal(), json=True), Progress(100, "x")):
        quiet.advance(50)
        quiet.close()
        assert not quiet.enabled
    assert Progress(10, "x", stream=io.StringIO()).enabled is False


# -- the sqlite3 + sha256sum recipe of docs/auditor.md -----------------------------------


def _recipe() -> str:
    text = (ROOT / "docs" / "auditor.md").read_text()
    found = re.search(r"```bash\n(#!/bin/bash\n# verify-chain\.sh.*?)```", text, re.S)
    assert found, "docs/auditor.md lost its verify-chain.sh recipe"
    return found.group(1)


@pytest.mark.skipif(
    not (shutil.which("sqlite3") and shutil.which("sha256sum") and shutil.which("bash")),
    reason="needs the sqlite3 and sha256sum command-line tools",
)
def test_the_auditors_shell_recipe_agrees_with_rota(log: Path, tmp_path: Path) -> None:
    script = tmp_path / "verify-chain.sh"
    script.write_text(_recipe())

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(script), str(log)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    position, head_hash = _head(log)
    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok: {position} events, head {head_hash}"
    _sql(log, "UPDATE events SET data = data || ' ' WHERE position = 9")
    done = run()
    assert done.returncode == 1 and done.stdout.startswith("FAILED at position 9")


# -- the command line, as real subprocesses ---------------------------------------------


def _rota(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("ROTA_STORE", None)
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _ok(cwd: Path, *args: str) -> str:
    done = _rota(cwd, *args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar when stderr is not a terminal
    return done.stdout


def test_cli_export_verify_import(log: Path, tmp_path: Path) -> None:
    position, head_hash = _head(log)
    store = f"sqlite:///{log}"
    dump = _ok(tmp_path, "--store", store, "export")
    assert dump.count("\n") == position + 1
    (tmp_path / "all.jsonl").write_text(dump)
    summary = json.loads(
        _ok(tmp_path, "--store", store, "export", "--from", "5", "--out", "part.jsonl", "--json")
    )
    assert summary["events"] == position - 5 and summary["head_hash"] == head_hash
    for name in ("all.jsonl", "part.jsonl"):
        report = json.loads(_ok(tmp_path, "audit", "verify", "--file", name, "--json"))
        assert report["ok"] and report["head_hash"] == head_hash
    line = _ok(tmp_path, "audit", "verify", "--file", "all.jsonl")
    assert line == f"ok: {position} events, head {position} {head_hash}\n"
    text = _ok(tmp_path, "import", "all.jsonl", "--to", "sqlite:///copy.db")
    assert text.startswith(f"imported {position} events into sqlite:///copy.db")
    assert _rows(tmp_path / "copy.db") == _rows(log)
    again = _rota(tmp_path, "import", "all.jsonl", "--store", "copy.db")
    assert again.returncode == 1 and again.stderr.startswith("rota: store_not_empty: ")
    missing = _rota(tmp_path, "import", "all.jsonl")
    assert missing.returncode == 2 and missing.stderr.startswith("rota: usage: ")
    (tmp_path / "bad.jsonl").write_text(dump.replace('"version":1', '"version":2', 1))
    bad = _rota(tmp_path, "audit", "verify", "--file", "bad.jsonl")
    assert bad.returncode == 1 and bad.stdout.startswith("FAILED at position 1: ")
    refused = _rota(tmp_path, "import", "bad.jsonl", "--to", "fresh.db")
    assert refused.returncode == 1 and "rota: invalid_export: " in refused.stderr
    assert _head(tmp_path / "fresh.db") == (0, GENESIS_HEX)


def test_cli_checkpoints_keygen_and_truncation(log: Path, tmp_path: Path) -> None:
    store = f"sqlite:///{log}"
    keys = json.loads(_ok(tmp_path, "audit", "keygen", "--out", "audit.key", "--json"))
    assert keys["public_key"] == "audit.key.pub" and len(keys["key_id"]) == 16
    written = json.loads(
        _ok(tmp_path, "--store", store, "audit", "checkpoint", "--dir", "cps", "--key",
            "audit.key", "--json")
    )  # fmt: skip
    assert written["key_id"] == keys["key_id"]
    path = Path(written["path"])
    ok = _ok(tmp_path, "--store", store, "audit", "verify", "--checkpoint", str(path),
             "--public-key", "audit.key.pub")  # fmt: skip
    assert "extends 1 checkpoint(s)" in ok and "signatures verified" in ok
    head = written["position"]
    _sql(log, f"DELETE FROM events WHERE position > {head - 2}")
    assert _ok(tmp_path, "--store", store, "audit", "verify").startswith("ok: ")
    cut = _rota(tmp_path, "--store", store, "audit", "verify", "--checkpoints", "cps")
    assert cut.returncode == 1
    assert cut.stdout.startswith(f"FAILED at position {head - 1}: the log ends at position")
    report = json.loads(
        _rota(
            tmp_path, "--store", store, "audit", "verify", "--checkpoints", "cps", "--json"
        ).stdout
    )
    assert report["ok"] is False and report["checkpoint_ok"] is False
    assert report["signatures"] == "not_checked"
    assert path.suffix == ".note"
    lines = (tmp_path / path).read_text().split("\n")
    lines[1] = str(head - 2)  # an attacker "moves" the checkpoint to hide the truncation
    (tmp_path / "moved.note").write_text("\n".join(lines))
    forged = _rota(tmp_path, "--store", store, "audit", "verify", "--checkpoint", "moved.note",
                   "--public-key", "audit.key.pub")  # fmt: skip
    assert forged.returncode == 1 and forged.stderr.startswith("rota: bad_signature: ")


# -- PostgreSQL: the migration path ------------------------------------------------------


@pytest.mark.postgres
def test_import_moves_a_sqlite_log_onto_postgresql(log: Path, tmp_path: Path) -> None:
    from postgres import schema_url, temporary_schema

    from rota.infrastructure.stores import open_store

    out, _ = _export_lines(log, tmp_path)
    with temporary_schema() as schema, open_store(schema_url(schema)) as store:
        try:
            report = import_export(out, store, page=5)
        except StoreError as exc:
            if exc.code != "import_unsupported":
                raise
            assert store.head().position == 0  # refused cleanly: nothing written
            pytest.skip("PostgresStore.append_raw is not implemented yet")
        assert (report.head_position, report.head_hash) == _head(log)
        again = io.BytesIO()
        export(store, again)
    ours = out.read_bytes().splitlines()
    theirs = again.getvalue().splitlines()
    assert theirs[1:] == ours[1:]  # every row byte for byte; only the store id differs


def _doctor_checkpoint(cwd: Path, store: str) -> dict[str, Any]:
    done = _rota(cwd, "--store", store, "doctor", "--json")
    report = json.loads(done.stdout)
    check: dict[str, Any] = next(c for c in report["checks"] if c["name"] == "checkpoint")
    return {**check, "ok": report["ok"]}


def test_doctor_after_an_import_tells_the_old_stores_checkpoints_from_a_lost_tail(
    log: Path, tmp_path: Path
) -> None:
    """Issue 15 item 9: export, import into a new store, keep the same `checkpoint_dir`."""
    (tmp_path / "rota.toml").write_text('[audit]\ncheckpoint_dir = "cps"\n')
    old = f"sqlite:///{log}"
    _ok(tmp_path, "--store", old, "audit", "checkpoint", "--dir", "cps")
    _ok(tmp_path, "--store", old, "export", "--out", "all.jsonl")
    _ok(tmp_path, "import", "all.jsonl", "--to", "sqlite:///new.db")
    new = f"sqlite:///{tmp_path / 'new.db'}"
    imported = _doctor_checkpoint(tmp_path, new)
    assert imported["ok"] and imported["status"] == "warn", imported
    assert "an import into a new store, not a lost tail" in imported["detail"]
    assert "restore" not in imported["advice"] and "rota run" in imported["advice"]
    # The new store writes its own checkpoint beside the old store's, which stays intact.
    before = {p.name: p.read_bytes() for p in (tmp_path / "cps").iterdir()}
    _ok(tmp_path, "--store", new, "audit", "checkpoint", "--dir", "cps")
    after = {p.name: p.read_bytes() for p in (tmp_path / "cps").iterdir()}
    assert len(after) == 2 and all(after[name] == data for name, data in before.items())
    own = _doctor_checkpoint(tmp_path, new)
    assert own["ok"] and own["status"] == "ok", own
    assert "1 checkpoints of other stores" in own["detail"]
    # The old store still judges its own checkpoint, not the new store's.
    assert _doctor_checkpoint(tmp_path, old)["status"] == "ok"
    # Its own checkpoint is still held against the new store: a lost tail fails as ever.
    position, _ = _head(tmp_path / "new.db")
    with SQLiteStore(tmp_path / "new.db") as store:
        store.write(lambda c: c.execute("DELETE FROM events WHERE position > ?", (position - 2,)))
    lost = _doctor_checkpoint(tmp_path, new)
    assert not lost["ok"] and lost["status"] == "fail"
    assert "log_behind_checkpoint" in lost["detail"] and "restore a full backup" in lost["advice"]


def test_doctor_names_an_import_that_missed_the_old_stores_last_events(
    log: Path, tmp_path: Path
) -> None:
    (tmp_path / "rota.toml").write_text('[audit]\ncheckpoint_dir = "cps"\n')
    old = f"sqlite:///{log}"
    _ok(tmp_path, "--store", old, "audit", "checkpoint", "--dir", "cps")
    _ok(tmp_path, "--store", old, "export", "--out", "early.jsonl")
    make_log(log, works=1, start=WORKS)  # the old store ran on after the export
    _ok(tmp_path, "--store", old, "audit", "checkpoint", "--dir", "cps")
    _ok(tmp_path, "import", "early.jsonl", "--to", "sqlite:///new.db")
    missed = _doctor_checkpoint(tmp_path, f"sqlite:///{tmp_path / 'new.db'}")
    assert not missed["ok"] and missed["status"] == "fail", missed
    assert "the export this store was imported from missed positions" in missed["detail"]
    assert "export it again" in missed["advice"] and "recover-corrupt" in missed["advice"]
    # A store that shares the directory but not the log: a warning, not a restore.
    make_log(tmp_path / "other.db", works=1)
    other = _doctor_checkpoint(tmp_path, f"sqlite:///{tmp_path / 'other.db'}")
    assert other["ok"] and other["status"] == "warn", other
    assert "another store shares the directory" in other["detail"]


def test_checkpoint_files_name_their_store_and_earlier_names_still_read(
    log: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "cps"
    with SQLiteStore(log) as store:
        written = cp.Checkpointer(store, folder).write()
        store_id = store.store_id
    named = folder / f"checkpoint-{written.position:012d}-{store_id}.note"
    assert [p.name for p in folder.iterdir()] == [named.name]
    legacy = folder / cp.file_name(written.position)
    named.rename(legacy)  # as an earlier rota named it
    assert cp.latest(folder, store_id) == written and cp.latest(folder, "another") is None
    other = folder / cp.file_name(written.position, "0000-another-store")
    shutil.copy(legacy, other)
    with pytest.raises(cp.CheckpointError) as renamed:
        cp.load(other)
    assert "names store 0000-another-store" in str(renamed.value)
