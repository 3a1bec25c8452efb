"""`rota audit prove` and `rota audit consistency`: proofs in the shared JSON form that
verify (RFC 9162) against the checkpoint notes they embed; a clear refusal without one."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure import merkle
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay import checkpoint as cp


def _rota(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("ROTA_STORE", None)
    env.pop("ROTA_CONFIG", None)
    command = [sys.executable, "-P", "-m", "rota", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _append(path: Path, first: int, count: int) -> None:
    with SQLiteStore(path) as store:
        events = [InputAccepted(work_id="w", key=f"k{first + i}") for i in range(count)]
        if first == 0:
            events[0] = WorkSubmitted(work_id="w", scope="root", binding="b")  # type: ignore[call-overload]
        store.append([NewEvent("work/w", e) for e in events])


def _root(note: str) -> bytes:
    return base64.b64decode(note.split("\n")[2])


def test_prove_and_consistency_print_proofs_that_verify(tmp_path: Path) -> None:
    log = tmp_path / "log.db"
    store = ("--store", f"sqlite:///{log}")
    _append(log, 0, 300)
    refused = _rota(tmp_path, *store, "audit", "prove", "5", "--dir", "cps")
    assert refused.returncode != 0 and "rota audit checkpoint" in refused.stderr
    assert _rota(tmp_path, *store, "audit", "checkpoint", "--dir", "cps").returncode == 0
    _append(log, 300, 700)
    assert _rota(tmp_path, *store, "audit", "checkpoint", "--dir", "cps").returncode == 0
    for position in (1, 5, 299, 300, 301, 1000):
        done = _rota(tmp_path, *store, "audit", "prove", str(position), "--dir", "cps", "--json")
        assert done.returncode == 0, done.stderr
        proof = json.loads(done.stdout)
        assert proof["format"] == "rota-inclusion/1" and proof["tree_size"] == 1000
        envelope = base64.b64decode(proof["envelope"])
        assert json.loads(envelope.split(b"\n")[0])[0] == position
        event = hashlib.sha256(bytes.fromhex(proof["previous_hash"]) + envelope).digest()
        assert event.hex() == proof["event_hash"]
        path = [bytes.fromhex(p) for p in proof["path"]]
        leaf = merkle.leaf_hash(event)
        assert merkle.verify_inclusion(position - 1, 1000, leaf, path, _root(proof["checkpoint"]))
    human = _rota(tmp_path, *store, "audit", "prove", "7", "--dir", "cps")
    assert human.returncode == 0 and "(verified)" in human.stdout
    done = _rota(tmp_path, *store, "audit", "consistency", "300", "1000", "--dir", "cps", "--json")
    assert done.returncode == 0, done.stderr
    proof = json.loads(done.stdout)
    assert (proof["format"], proof["old_size"], proof["new_size"]) == (
        "rota-consistency/1",
        300,
        1000,
    )
    old, new = _root(proof["old_checkpoint"]), _root(proof["new_checkpoint"])
    steps = [bytes.fromhex(p) for p in proof["path"]]
    assert merkle.verify_consistency(300, 1000, old, new, steps)
    files = sorted(str(p) for p in (tmp_path / "cps").iterdir())
    by_file = _rota(tmp_path, *store, "audit", "consistency", files[0], files[1])
    assert by_file.returncode == 0 and "extends the log of 300" in by_file.stdout
    assert cp.load(files[0]).position == 300
