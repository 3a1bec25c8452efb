"""`log_regressed` in doctor and putting the lost events back (issue 32, item 3), shown on a
log that lost its tail the way a promoted replica does (here an SQLite file put back from an
older copy: the judgement and the restore are the same for every backend).

- doctor names the missing positions from the store's checkpoints (not `log_rewritten`, a
  tamper verdict with the wrong range) and how to restore them;
- `rota import --append` puts back an export of them (`rota export --from N` on a copy that
  still holds them): every link checked, positions, times and hashes kept; then doctor is ok;
- a log written on since the loss (a fork) is reported as such and the append is refused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from contract.helpers import submitted

from rota.application.errors import StoreError
from rota.infrastructure.stores import open_store
from rota.replay.checkpoint import Checkpointer
from rota.replay.doctor import doctor
from rota.replay.export import export_to_file
from rota.replay.regression import append_export


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lost_tail(tmp_path: Path) -> tuple[str, str, Path]:
    """A store at position 3 whose checkpoint says 5, and a copy that still holds 1..5."""
    db, old, checkpoints = tmp_path / "rota.db", tmp_path / "old.db", tmp_path / "checkpoints"
    url = f"sqlite:///{db}"
    with open_store(url) as store:
        for n in range(3):
            store.append([submitted(f"w{n}")])
    shutil.copy(db, tmp_path / "at-3.db")  # what the replica had received
    with open_store(url) as store:
        for n in range(3, 5):
            store.append([submitted(f"w{n}")])
        Checkpointer(store, checkpoints).write()
    shutil.copy(db, old)  # the old primary, which still holds them
    shutil.copy(tmp_path / "at-3.db", db)  # the failover: the log as the replica had it
    return url, f"sqlite:///{old}", checkpoints


def test_doctor_names_the_lost_positions_and_an_append_puts_them_back(tmp_path: Path) -> None:
    url, old, checkpoints = _lost_tail(tmp_path)
    report = doctor(url, checkpoint_dir=checkpoints)
    check = report.check("checkpoint")
    assert check.status == "fail"
    assert check.detail.startswith(
        "log_regressed: the log ends at position 3, but position 5 was recorded in its checkpoints"
    )
    assert "positions 4..5 (2 events" in check.detail
    assert "log_behind_checkpoint" in check.detail  # what the checkpoint check says, kept
    assert "export --from 3" in check.advice and "import --append" in check.advice
    assert "restore a full backup" in check.advice  # when no node holds them
    tail = tmp_path / "tail.jsonl"
    with open_store(old) as source:
        export_to_file(source, tail, after=3)  # what `rota export --from 3` writes
    appended = _cli(tmp_path, "--store", url, "import", "--append", str(tail), "--json")
    assert appended.returncode == 0, appended.stderr
    said = json.loads(appended.stdout)
    assert (said["appended"], said["first"], said["last"]) == (2, 4, 5)
    with open_store(url) as store:
        assert append_export(tail, store) == (6, 5)  # again: nothing to append
    assert doctor(url, checkpoint_dir=checkpoints).check("checkpoint").status == "ok"
    with open_store(url) as store, open_store(old) as source:
        assert store.read_raw(0) == source.read_raw(0)  # the same rows, times and hashes


def test_a_log_written_on_after_the_loss_is_a_fork_and_refuses_the_append(
    tmp_path: Path,
) -> None:
    url, old, checkpoints = _lost_tail(tmp_path)
    with open_store(url) as store:
        store.append([submitted("someone-else")])  # position 4, not the lost one
    check = doctor(url, checkpoint_dir=checkpoints).check("checkpoint")
    assert check.status == "fail" and check.detail.startswith("log_regressed: ")
    tail = tmp_path / "tail.jsonl"
    with open_store(old) as source:
        export_to_file(source, tail, after=3)
    with open_store(url) as store, pytest.raises(StoreError) as refused:
        append_export(tail, store)
    assert refused.value.code == "import_mismatch" and "forked" in str(refused.value)
    with open_store(url) as store:
        assert store.head().position == 4  # nothing appended
