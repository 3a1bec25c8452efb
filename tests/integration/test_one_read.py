"""One read of the log for every fold: `rebuild`, `verify` and `rota doctor` fold all their
projections from a single pass over the log (each event read and decoded once), and what
they fold is exactly what folding each projection alone, with a read of its own, gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.application.ports import RecordedEvent
from rota.infrastructure.spill import SpillFile
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import PERSISTED, HistoryProjection, SchedulerProjection
from rota.replay import doctor_read
from rota.replay import rebuild as rebuild_module
from rota.replay.doctor import doctor
from rota.replay.doctor_read import OneRead
from rota.replay.export import import_export
from rota.replay.read_only import ReadOnlyLog
from rota.replay.rebuild import fold, fold_spilling, rebuild, verify

from .test_doctor import store, template  # noqa: F401  (fixtures)

HISTORIES_DIR = Path(__file__).resolve().parents[1] / "histories"
EXPECTED = json.loads((HISTORIES_DIR / "expected.json").read_text("utf-8"))
HISTORIES = sorted(EXPECTED["histories"])


def imported(name: str, tmp_path: Path) -> SQLiteStore:
    log = SQLiteStore(tmp_path / f"{name}.db")
    import_export(HISTORIES_DIR / EXPECTED["histories"][name]["file"], log)
    return log


def alone(log: SQLiteStore, kind: Any, upto: int | None) -> Any:
    """`kind` folded by itself, held whole in memory, through a read of its own."""
    projection = kind()
    fold(log, [projection], upto=upto)
    return projection


def rows_of(projection: Any) -> dict[str, bytes | None]:
    return {key: projection.row(key) for key in sorted(projection.row_keys())}


def spill_files(directory: Path) -> Any:
    """A spill file of its own for each fold (two folds of one projection may run)."""
    made = iter(range(1_000))
    directory.mkdir()
    return lambda name: SpillFile(directory / f"{next(made)}-{name}.spill")


class Reads:
    """Counts what is read of the log through `read` (positions, each time it is read)."""

    def __init__(self, log: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.positions: list[int] = []
        read = log.read

        def counting(after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
            batch = read(after, limit)
            self.positions += [r.position for r in batch]
            return batch

        monkeypatch.setattr(log, "read", counting)


@pytest.mark.parametrize("name", HISTORIES)
def test_one_read_folds_what_each_projection_folded_alone_gives(name: str, tmp_path: Path) -> None:
    log = imported(name, tmp_path)
    head = log.head().position
    # Every projection to the head, both to the middle, and each to its own position (as
    # verify and doctor fold them), the scheduler twice (doctor: its stored copy's position
    # and the head).
    cases: list[tuple[list[Any], list[int | None]]] = [
        (list(PERSISTED), [None, None]),
        (list(PERSISTED), [head // 2, head // 2]),
        (list(PERSISTED), [head // 3, None]),
        ([SchedulerProjection, HistoryProjection, SchedulerProjection], [head // 2, 1, None]),
    ]
    for n, (kinds, upto) in enumerate(cases):
        folded, position = fold_spilling(log, kinds, upto, spill=spill_files(tmp_path / str(n)))
        try:
            assert position == max(head if u is None else u for u in upto)
            for kind, limit, mine in zip(kinds, upto, folded, strict=True):
                theirs = alone(log, kind, limit)
                assert mine.position == theirs.position == (head if limit is None else limit)
                assert mine.digest() == theirs.digest()
                assert dict(mine.spill.items()) == {
                    k: v for k, v in rows_of(theirs).items() if v is not None
                }
        finally:
            for spilled in folded:
                spilled.spill.close()
    log.close()


def test_a_fold_of_many_projections_reads_each_event_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = imported("lifecycle", tmp_path)
    head = log.head().position
    reads = Reads(log, monkeypatch)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    folded, _ = fold_spilling(
        log,
        [SchedulerProjection, HistoryProjection],
        [head // 2, None],
        spill=lambda kind_name: SpillFile(scratch / f"{kind_name}.spill"),
    )
    for spilled in folded:
        spilled.spill.close()
    assert reads.positions == list(range(1, head + 1))
    log.close()


def test_rebuild_and_verify_read_the_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = imported("admission", tmp_path)
    head = log.head().position
    expected = {kind.name: alone(log, kind, None).digest() for kind in PERSISTED}
    reads = Reads(log, monkeypatch)
    path = default_path(log)
    assert path is not None
    with SQLiteProjectionStore(path) as projections:
        report = rebuild(log, projections)
        assert reads.positions == list(range(1, head + 1))
        assert report.digests == expected
        reads.positions.clear()
        assert verify(log, projections).ok
        assert reads.positions == list(range(1, head + 1))
    log.close()


# -- rota doctor: the hash-chain walk and the folds in one read -----------------------------


def _report(path: Path) -> list[tuple[str, str, str]]:
    return [(c.name, c.status, c.detail) for c in doctor(str(path)).checks]


def _separate_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Doctor as before one read: the folds read the log themselves, the walk on its own."""
    monkeypatch.setattr(OneRead, "read_pages", lambda self, folds: folds.read_on(self.log))


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions doctor reads of the log (decoded or as stored), each time it reads; not
    the lookups of one row's stored hash (a stored projection's position, a checkpoint's)."""
    positions: list[int] = []
    read, read_raw = ReadOnlyLog.read, ReadOnlyLog.read_raw

    def counting(self: ReadOnlyLog, after: int = 0, limit: int = 1000) -> list[Any]:
        batch = read(self, after, limit)
        positions.extend(r.position for r in batch)
        return batch

    def counting_raw(self: ReadOnlyLog, after: int = 0, limit: int = 1000) -> list[Any]:
        batch = read_raw(self, after, limit)
        if limit > 1:
            positions.extend(r.position for r in batch)
        return batch

    monkeypatch.setattr(ReadOnlyLog, "read", counting)
    monkeypatch.setattr(ReadOnlyLog, "read_raw", counting_raw)
    return positions


def _head(path: Path) -> int:
    with SQLiteStore(path) as log:
        return log.head().position


@pytest.mark.parametrize("lagging", [False, True])
def test_doctor_reads_each_event_once_and_reports_what_separate_reads_report(
    store: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    lagging: bool,
) -> None:
    if lagging:  # three folds: the stored projections' position and the head's
        with rota.open(store, config={}, projections=False) as scheduler:
            scheduler.register("more", lambda ctx: None)
            for n in range(5):
                scheduler.submit(f"more-{n}", binding="more")
            scheduler.run_until_idle(timeout=60)
    positions = _count_reads(monkeypatch)
    one_read = _report(store)
    assert sorted(positions) == list(range(1, _head(store) + 1))
    assert all(status != "fail" for _, status, _ in one_read)
    _separate_reads(monkeypatch)
    positions.clear()
    assert _report(store) == one_read
    assert len(positions) > _head(store), "the separate reads read the log more than once"


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE events SET recorded_at = '2001-01-01T00:00:00.000000Z' WHERE position = 9",
        'UPDATE events SET data = \'{"type":"no.such.event"}\' WHERE position = 9',
        "UPDATE events SET data = 'not json' WHERE position = 20",
        "DELETE FROM events WHERE position = 12",
    ],
)
@pytest.mark.parametrize("page", [10_000, 7])
def test_on_a_damaged_log_each_check_keeps_its_own_verdict(
    store: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
    page: int,
) -> None:
    """A row the walk finds bad does not stop the folds, a row the folds cannot decode does
    not stop the walk: the report is the one separate reads give (pages of 7 rows: the walk
    stops pages before the head, and the folds read on by themselves)."""
    monkeypatch.setattr(doctor_read, "PAGE", page)
    monkeypatch.setattr(rebuild_module, "PAGE", page)
    with SQLiteStore(store) as log:
        log.write(lambda cursor: cursor.execute(damage))
    one_read = _report(store)
    assert {name: status for name, status, _ in one_read}["hash_chain"] == "fail"
    _separate_reads(monkeypatch)
    assert _report(store) == one_read
