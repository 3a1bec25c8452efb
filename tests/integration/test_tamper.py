"""Tamper evidence: edits made behind rota's back with plain SQL are found, by position."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.audit import verify_chain


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    with SQLiteStore(path) as store:
        for i in range(1, 11):
            store.append(
                [
                    NewEvent(f"work/w{i}", WorkSubmitted(work_id=f"w{i}", scope="r", binding="b")),
                    NewEvent(
                        f"work/w{i}",
                        InputAccepted(work_id=f"w{i}", key="k", payload={"i": i}),
                        f"input/w{i}/k",
                    ),
                ]
            )
    return path


def _sql(path: Path, *statements: str) -> None:
    conn = apsw.Connection(str(path))
    for statement in statements:
        conn.execute(statement)
    conn.close()


def _verify(path: Path):  # type: ignore[no-untyped-def]
    with SQLiteStore(path) as store:
        return verify_chain(store)


def test_untouched_log_verifies(log: Path) -> None:
    report = _verify(log)
    assert report.ok and report.checked == 20 and report.first_bad_position is None


def test_edited_payload_is_reported_at_its_position(log: Path) -> None:
    _sql(log, """UPDATE events SET data = replace(data, '"i":7', '"i":8') WHERE position = 14""")
    report = _verify(log)
    assert not report.ok
    assert report.first_bad_position == 14
    assert "hash does not match" in (report.reason or "")
    assert report.checked == 13


@pytest.mark.parametrize(
    "column,value",
    [
        ("stream", "'work/x'"),
        ("version", "9"),
        ("type", "'core.other'"),
        ("delivery_id", "'forged'"),
        ("recorded_at", "'2020-01-01T00:00:00.000000Z'"),
    ],
)
def test_any_edited_column_is_reported(log: Path, column: str, value: str) -> None:
    _sql(log, f"UPDATE events SET {column} = {value} WHERE position = 5")
    assert _verify(log).first_bad_position == 5


def test_deleted_middle_row_is_reported(log: Path) -> None:
    _sql(log, "DELETE FROM events WHERE position = 9")
    report = _verify(log)
    assert report.first_bad_position == 9
    assert "missing" in (report.reason or "")


def test_inserted_forged_row_is_reported(log: Path) -> None:
    _sql(
        log,
        "UPDATE events SET position = position + 1000 WHERE position > 6",
        "UPDATE events SET position = position - 999 WHERE position > 1000",
        "INSERT INTO events VALUES (7, 'work/forged', 1, 'core.work.submitted', 1, NULL, "
        "'{}', '2026-01-01T00:00:00.000000Z', 'ab')",
    )
    assert _verify(log).first_bad_position == 7


def test_reordered_rows_are_reported(log: Path) -> None:
    _sql(
        log,
        "UPDATE events SET position = -1 WHERE position = 3",
        "UPDATE events SET position = 3 WHERE position = 4",
        "UPDATE events SET position = 4 WHERE position = -1",
    )
    assert _verify(log).first_bad_position == 3


def test_rechained_edit_is_caught_by_stream_continuity(log: Path) -> None:
    """Even a forger who recomputes every later hash cannot hide a broken version sequence."""
    from rota.infrastructure.chain import GENESIS, canonical_envelope, link

    _sql(log, "UPDATE events SET version = 3 WHERE position = 2")
    conn = apsw.Connection(str(log))
    previous = GENESIS
    rows = conn.execute(
        "SELECT position, stream, version, type, type_version, delivery_id, recorded_at, data "
        "FROM events ORDER BY position"
    ).fetchall()
    for row in rows:
        previous = link(previous, canonical_envelope(*row))
        conn.execute("UPDATE events SET hash = ? WHERE position = ?", (previous.hex(), row[0]))
    conn.close()
    report = _verify(log)
    assert report.first_bad_position == 2
    assert "version 3" in (report.reason or "")
