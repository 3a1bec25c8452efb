"""Checkpoints are C2SP signed notes carrying the log's Merkle root; old JSON ones still read.

The note's bytes are the shared format exactly (five lines; an empty line and one
`— rota-<key_id> <base64(key hash || signature)>` line when signed, the key hash per C2SP);
a checkpoint whose root is not the log's is refused (`tree_root_mismatch`).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import msgspec
import pytest

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay import checkpoint as cp
from rota.replay.audit import check_extends, verify_chain, verify_records


def _store(path: Path, events: int = 300) -> SQLiteStore:
    store = SQLiteStore(path)
    inputs = [InputAccepted(work_id="w", key=f"k{i}") for i in range(events - 1)]
    submit = WorkSubmitted(work_id="w", scope="root", binding="b")
    store.append([NewEvent("work/w", e) for e in (submit, *inputs)])
    return store


def test_a_signed_note_has_the_shared_byte_form(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    private, public = cp.keygen(tmp_path / "k")
    with _store(tmp_path / "log.db") as store:
        written = cp.Checkpointer(store, tmp_path / "cps", key_path=private).write()
        root, head = store.tree_head(300).root, store.head()
        store_id = store.store_id
    path = tmp_path / "cps" / cp.file_name(300, store_id)
    data = path.read_bytes()
    text = (
        f"rota/{store_id}\n300\n{base64.b64encode(root).decode()}\nhead {head.hash}\n"
        f"time {written.written_at}\n"
    )
    assert data.decode().startswith(text + "\n\u2014 rota-")
    name, blob = data.decode()[len(text) + 3 :].rstrip("\n").split(" ")
    key = cp.load_public_key(public)
    raw = cp.raw_public(key)
    assert name == f"rota-{hashlib.sha256(raw).hexdigest()[:16]}"
    signed = base64.b64decode(blob)
    assert signed[:4] == hashlib.sha256(name.encode() + b"\n\x01" + raw).digest()[:4]
    key.verify(signed[4:], text.encode())  # the signature covers exactly the note text
    loaded = cp.load(path)
    assert loaded == written and loaded.root == root.hex() and loaded.tree_size == 300
    cp.verify_signature(loaded, key)


def test_an_unsigned_note_is_the_text_alone_and_old_json_still_reads(tmp_path: Path) -> None:
    with _store(tmp_path / "log.db") as store:
        written = cp.Checkpointer(store, tmp_path / "cps").write()
        path = tmp_path / "cps" / cp.file_name(300, store.store_id)
        assert path.read_text().count("\n") == 5 and "\u2014" not in path.read_text()
        old = msgspec.structs.replace(written, root=None)
        legacy = cp.write_file(tmp_path / "old", old)
        assert legacy.suffix == ".json" and cp.load(legacy) == old
        assert check_extends(store, old) is None and check_extends(store, written) is None


def test_a_root_that_is_not_the_logs_is_refused(tmp_path: Path) -> None:
    with _store(tmp_path / "log.db") as store:
        written = cp.Checkpointer(store, tmp_path / "cps").write()
        forged = msgspec.structs.replace(written, root="00" * 32)
        verdict = check_extends(store, forged)
        assert verdict is not None and verdict[0] == "tree_root_mismatch"
        report = verify_chain(store, checkpoint=[written, forged])
        assert (
            not report.ok and report.checkpoint_reason and "Merkle root" in report.checkpoint_reason
        )
        assert verify_chain(store, checkpoint=written).ok
        rows = store.read_raw(0, 1000)
        assert check_extends(rows, forged, store_id=store.store_id) is not None
        assert check_extends(rows, written, store_id=store.store_id) is None
        assert verify_records(rows, checkpoint=written).ok
        assert not verify_records(rows, checkpoint=forged).ok


def test_a_missing_stored_node_fails_the_checkpoint_not_the_command(tmp_path: Path) -> None:
    import apsw

    with _store(tmp_path / "log.db", 600) as store:
        written = cp.Checkpointer(store, tmp_path / "cps").write()
    conn = apsw.Connection(str(tmp_path / "log.db"))
    conn.execute("DELETE FROM merkle_nodes WHERE level = 9")
    conn.close()
    with SQLiteStore(tmp_path / "log.db") as store:
        verdict = check_extends(store, written)
        assert verdict is not None and verdict[0] == "tree_root_mismatch"
        assert "positions 1..512" in verdict[1]
