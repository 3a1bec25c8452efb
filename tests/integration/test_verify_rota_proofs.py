"""The proofs `rota audit prove` and `rota audit consistency` print are accepted by a copy of
rota/verify.py run alone, with only the public key; edited, they are refused.

rota's side and the standalone verifier are built to the same byte formats by different
hands; this is where the two meet. Skipped where this rota has no `audit prove` yet.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.sqlite.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"ROTA_STORE", "ROTA_CONFIG"}}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def _rota(cwd: Path, *args: str) -> str:
    done = _run(cwd, "-P", "-m", "rota", "--store", f"sqlite:///{cwd / 'log.db'}", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _append(path: Path, first: int, count: int) -> None:
    with SQLiteStore(path) as store:
        events = [InputAccepted(work_id="w", key=f"k{first + i}") for i in range(count)]
        if first == 0:
            events[0] = WorkSubmitted(work_id="w", scope="root", binding="b")  # type: ignore[call-overload]
        store.append([NewEvent("work/w", e) for e in events])


def test_rotas_own_proofs_pass_the_standalone_verifier(tmp_path: Path) -> None:
    if _run(tmp_path, "-P", "-m", "rota", "audit", "prove", "--help").returncode != 0:
        pytest.skip("this rota has no `rota audit prove` (Merkle proofs) yet")
    _append(tmp_path / "log.db", 0, 300)
    _rota(tmp_path, "audit", "keygen", "--out", "audit.key")
    _rota(tmp_path, "audit", "checkpoint", "--dir", "cps", "--key", "audit.key")
    _append(tmp_path / "log.db", 300, 700)
    _rota(tmp_path, "audit", "checkpoint", "--dir", "cps", "--key", "audit.key")
    auditor = tmp_path / "auditor"  # the verifier's file and the public key, nothing else
    auditor.mkdir()
    shutil.copy(ROOT / "rota" / "verify.py", auditor / "verify.py")
    shutil.copy(tmp_path / "audit.key.pub", auditor / "audit.key.pub")

    def verify(kind: str, proof: str) -> subprocess.CompletedProcess[str]:
        (auditor / "proof.json").write_text(proof)
        return _run(auditor, "-I", "verify.py", kind, "proof.json", "--key", "audit.key.pub")

    for position in (1, 2, 299, 300, 301, 512, 999, 1000):
        proof = _rota(tmp_path, "audit", "prove", str(position), "--dir", "cps", "--json")
        done = verify("inclusion", proof)
        assert done.returncode == 0, (position, done.stderr)
        assert done.stdout.startswith(f"verified: position {position} ")
        forged = json.loads(proof) | {"position": position % 1000 + 1}
        refused = verify("inclusion", json.dumps(forged))
        assert refused.returncode == 1 and refused.stderr.startswith("refused: ")

    proof = _rota(tmp_path, "audit", "consistency", "300", "1000", "--dir", "cps", "--json")
    done = verify("consistency", proof)
    assert done.returncode == 0, done.stderr
    assert "tree size 1000" in done.stdout and "extends size 300" in done.stdout
    swapped = json.loads(proof)
    swapped["old_checkpoint"], swapped["new_checkpoint"] = (
        swapped["new_checkpoint"],
        swapped["old_checkpoint"],
    )
    assert verify("consistency", json.dumps(swapped)).returncode == 1
