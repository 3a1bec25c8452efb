"""Doctor on a projection file whose rows a damaged page turned into NULL or numbers (issue
15 item 5: a truncated projection file raised TypeError in doctor)."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from rota.replay.doctor import doctor

from .test_doctor import build_store, copy_store, run_cli


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("built"), works=20)


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    return copy_store(built, tmp_path / "store")


@pytest.mark.parametrize(("stored", "shown"), [(1.5, "float"), (10**12, "int")])
def test_a_row_that_is_not_bytes_fails_projection_drift_without_a_traceback(
    store: Path, stored: object, shown: str
) -> None:
    projections = Path(f"{store}.projections")
    with apsw.Connection(str(projections)) as conn:
        conn.execute(
            "UPDATE rows_scheduler SET value = ? WHERE key = (SELECT min(key) FROM rows_scheduler)",
            (stored,),
        )
    done = run_cli("--store", str(store), "doctor", "--json", cwd=store.parent)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    drift = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "projection_drift")
    assert drift["status"] == "fail"
    assert f"holds {shown}, not the bytes of a row" in drift["detail"]
    assert "recover-corrupt" in drift["advice"]


def test_a_projection_file_cut_mid_page_is_reported_not_raised(store: Path) -> None:
    """Cutting the file at every 512 bytes: each report is a verdict, never an exception."""
    projections = Path(f"{store}.projections")
    whole = projections.read_bytes()
    for size in range(0, len(whole), 512):
        projections.write_bytes(whole[:size])
        report = doctor(str(store))
        assert not report.ok, size
