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
from rota.replay.doctor import doctor
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


# -- rota doctor ----------------------------------------------------------------------------


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The positions doctor reads of the log: decoded (`read`: its folds) and as stored
    (`read_raw`: the hash-chain walk; not the lookups of one row's stored hash, a stored
    projection's position or a checkpoint's), each time it reads them."""
    decoded: list[int] = []
    stored: list[int] = []
    read, read_raw = ReadOnlyLog.read, ReadOnlyLog.read_raw

    def counting(self: ReadOnlyLog, after: int = 0, limit: int = 1000) -> list[Any]:
        batch = read(self, after, limit)
        decoded.extend(r.position for r in batch)
        return batch

    def counting_raw(self: ReadOnlyLog, after: int = 0, limit: int = 1000) -> list[Any]:
        batch = read_raw(self, after, limit)
        if limit > 1:
            stored.extend(r.position for r in batch)
        return batch

    monkeypatch.setattr(ReadOnlyLog, "read", counting)
    monkeypatch.setattr(ReadOnlyLog, "read_raw", counting_raw)
    return decoded, stored


@pytest.mark.parametrize("lagging", [False, True])
def test_doctor_folds_every_projection_from_one_read(
    store: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    lagging: bool,
) -> None:
    """Two folds (the stored projections at the head), or three (behind it: each to its
    stored position, and the scheduler's state to the head): one read of the log."""
    if lagging:
        with rota.open(store, config={}, projections=False) as scheduler:
            scheduler.register("more", lambda ctx: None)
            for n in range(5):
                scheduler.submit(f"more-{n}", binding="more")
            scheduler.run_until_idle(timeout=60)
    decoded, stored = _count_reads(monkeypatch)
    report = doctor(str(store), lag_threshold=0 if lagging else 10_000)
    with SQLiteStore(store) as log:
        every = list(range(1, log.head().position + 1))
    assert decoded == every
    assert stored == every
    assert report.check("projection_drift").status == "ok"
    assert report.check("projection_lag").status == ("warn" if lagging else "ok")
