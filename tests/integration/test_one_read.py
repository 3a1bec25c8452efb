"""One read of the log for every fold: `rebuild`, `verify` and `rota doctor` fold all their
projections from a single pass over the log (each event read and decoded once), and what
they fold is exactly what folding each projection alone, with a read of its own, gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rota.application.ports import RecordedEvent
from rota.infrastructure.spill import SpillFile
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import PERSISTED, HistoryProjection, SchedulerProjection
from rota.replay.export import import_export
from rota.replay.rebuild import fold, fold_spilling, rebuild, verify

HISTORIES_DIR = Path(__file__).resolve().parents[1] / "histories"
EXPECTED = json.loads((HISTORIES_DIR / "expected.json").read_text("utf-8"))
HISTORIES = sorted(EXPECTED["histories"])


def imported(name: str, tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / f"{name}.db")
    import_export(HISTORIES_DIR / EXPECTED["histories"][name]["file"], store)
    return store


def alone(store: SQLiteStore, kind: Any, upto: int | None) -> Any:
    """`kind` folded by itself, held whole in memory, through a read of its own."""
    projection = kind()
    fold(store, [projection], upto=upto)
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

    def __init__(self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.positions: list[int] = []
        read = store.read

        def counting(after: int = 0, limit: int = 1000) -> list[RecordedEvent]:
            batch = read(after, limit)
            self.positions += [r.position for r in batch]
            return batch

        monkeypatch.setattr(store, "read", counting)


@pytest.mark.parametrize("name", HISTORIES)
def test_one_read_folds_what_each_projection_folded_alone_gives(name: str, tmp_path: Path) -> None:
    store = imported(name, tmp_path)
    head = store.head().position
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
        folded, position = fold_spilling(store, kinds, upto, spill=spill_files(tmp_path / str(n)))
        try:
            assert position == max(head if u is None else u for u in upto)
            for kind, limit, mine in zip(kinds, upto, folded, strict=True):
                theirs = alone(store, kind, limit)
                assert mine.position == theirs.position == (head if limit is None else limit)
                assert mine.digest() == theirs.digest()
                assert dict(mine.spill.items()) == {
                    k: v for k, v in rows_of(theirs).items() if v is not None
                }
        finally:
            for spilled in folded:
                spilled.spill.close()
    store.close()


def test_a_fold_of_many_projections_reads_each_event_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = imported("lifecycle", tmp_path)
    head = store.head().position
    reads = Reads(store, monkeypatch)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    folded, _ = fold_spilling(
        store,
        [SchedulerProjection, HistoryProjection],
        [head // 2, None],
        spill=lambda kind_name: SpillFile(scratch / f"{kind_name}.spill"),
    )
    for spilled in folded:
        spilled.spill.close()
    assert reads.positions == list(range(1, head + 1))
    store.close()


def test_rebuild_and_verify_read_the_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = imported("admission", tmp_path)
    head = store.head().position
    expected = {kind.name: alone(store, kind, None).digest() for kind in PERSISTED}
    reads = Reads(store, monkeypatch)
    path = default_path(store)
    assert path is not None
    with SQLiteProjectionStore(path) as projections:
        report = rebuild(store, projections)
        assert reads.positions == list(range(1, head + 1))
        assert report.digests == expected
        reads.positions.clear()
        assert verify(store, projections).ok
        assert reads.positions == list(range(1, head + 1))
    store.close()
