"""`rota audit verify` also judges the stored Merkle nodes against the rows.

A node altered, deleted or added beyond the head is reported with the positions it covers
(and fails the report though every row chains); a sound store passes with `tree_ok`.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.audit import verify_chain


def _store(path: Path, events: int) -> SQLiteStore:
    store = SQLiteStore(path)
    inputs = [InputAccepted(work_id="w", key=f"k{i}") for i in range(events - 1)]
    submit = WorkSubmitted(work_id="w", scope="root", binding="b")
    store.append([NewEvent("work/w", e) for e in (submit, *inputs)])
    return store


def _edit(path: Path, sql: str) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(sql)
    conn.close()


def test_a_sound_store_passes_with_its_tree_judged(tmp_path: Path) -> None:
    store = _store(tmp_path / "log.db", 1100)
    report = verify_chain(store)
    assert report.ok and report.tree_ok is True
    store.close()


@pytest.mark.parametrize(
    ("sql", "span", "why"),
    [
        (
            "UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 8 AND idx = 2",
            (513, 768),
            "does not match",
        ),
        (
            "UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 10 AND idx = 0",
            (1, 1024),
            "does not match",
        ),
        ("DELETE FROM merkle_nodes WHERE level = 9 AND idx = 1", (513, 1024), "is missing"),
        (
            "INSERT INTO merkle_nodes VALUES (8, 9, zeroblob(32))",
            (2305, 2560),
            "beyond the log's head",
        ),
        (
            "INSERT INTO merkle_nodes VALUES (12, 0, zeroblob(32))",
            (1, 4096),
            "beyond the log's head",
        ),
    ],
)
def test_a_bad_stored_node_is_reported_with_its_positions(
    tmp_path: Path, sql: str, span: tuple[int, int], why: str
) -> None:
    path = tmp_path / "log.db"
    _store(path, 1100).close()
    _edit(path, sql)
    store = SQLiteStore(path)
    report = verify_chain(store)
    assert not report.ok and report.tree_ok is False
    assert (report.tree_first, report.tree_last) == span
    assert report.first_bad_position is None  # the rows chain
    assert report.reason is not None and why in report.reason
    assert f"positions {span[0]}..{span[1]}" in report.reason
    store.close()


def test_a_store_no_writer_upgraded_yet_is_not_judged_by_a_read_only_verify(
    tmp_path: Path,
) -> None:
    from rota.replay.read_only import ReadOnlyLog

    path = tmp_path / "log.db"
    _store(path, 600).close()
    _edit(path, "DROP TABLE merkle_nodes")
    _edit(path, "UPDATE rota_meta SET value = '1' WHERE key = 'schema_version'")
    log = ReadOnlyLog(path, immutable=True)  # as doctor reads it: nothing upgrades it
    report = verify_chain(log)
    assert report.ok and report.tree_ok is None
    log.close()
    upgraded = SQLiteStore(path)  # a writer's open upgrades it
    assert verify_chain(upgraded).tree_ok is True
    upgraded.close()
