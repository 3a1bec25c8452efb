"""Folding projections side by side (forked children, one per projection) gives exactly what
folding them one after the other gives; a failing child is reported, never half-applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store
from rota.projections import PERSISTED, HistoryProjection, SchedulerProjection
from rota.replay.export import import_export
from rota.replay.rebuild import fold, rebuild, verify
from rota.replay.side_by_side import FoldedRows, can_split, fold_side_by_side

HISTORIES_DIR = Path(__file__).resolve().parents[1] / "histories"
HISTORIES = sorted(json.loads((HISTORIES_DIR / "expected.json").read_text("utf-8"))["histories"])


def imported(name: str, tmp_path: Path) -> SQLiteStore:
    expected = json.loads((HISTORIES_DIR / "expected.json").read_text("utf-8"))
    store = SQLiteStore(tmp_path / f"{name}.db")
    import_export(HISTORIES_DIR / expected["histories"][name]["file"], store)
    return store


def sequential(store: SQLiteStore, upto: int | None = None) -> list[Any]:
    fresh = [kind() for kind in PERSISTED]
    fold(store, fresh, upto=upto)
    return fresh


@pytest.mark.parametrize("name", HISTORIES)
def test_side_by_side_equals_one_after_the_other(name: str, tmp_path: Path) -> None:
    store = imported(name, tmp_path)
    assert can_split(store, len(PERSISTED)), "this test needs fork and two CPUs"
    head = store.head().position
    for upto in (head, head // 2):
        folded, position = fold_side_by_side(store, PERSISTED, [upto, upto])
        assert position == upto
        assert isinstance(folded[0], SchedulerProjection)
        assert isinstance(folded[1], FoldedRows)
        for mine, theirs in zip(folded, sequential(store, upto), strict=True):
            assert mine.position == theirs.position == upto
            assert mine.digest() == theirs.digest()
            assert sorted(mine.row_keys()) == sorted(theirs.row_keys())
            assert all(mine.row(key) == theirs.row(key) for key in theirs.row_keys())
    store.close()


def test_a_rebuild_side_by_side_stores_what_a_sequential_fold_gives(tmp_path: Path) -> None:
    store = imported("admission", tmp_path)
    path = default_path(store)
    assert path is not None
    with SQLiteProjectionStore(path) as projections:
        report = rebuild(store, projections)
        expected = {p.name: p.digest() for p in sequential(store)}
        assert report.digests == expected
        assert projections.metas()["history"].digest == expected["history"]
        loaded = projections.load_history(store)
        assert loaded is not None and loaded.digest() == expected["history"]
        assert verify(store, projections).ok
    store.close()


class Broken(HistoryProjection):
    name = "history"

    def fold_page(self, *args: Any) -> None:
        raise ValueError("a fold that breaks in the child")


def test_a_failing_child_raises_here_with_its_error(tmp_path: Path) -> None:
    store = imported("lifecycle", tmp_path)
    with pytest.raises(RuntimeError, match="a fold that breaks in the child"):
        fold_side_by_side(store, [SchedulerProjection, Broken], [None, None])
    store.close()


def test_without_a_url_another_process_can_open_the_folds_run_here(tmp_path: Path) -> None:
    store = imported("retries", tmp_path)
    # An in-memory store: another process cannot open it by its URL.
    log = open_store("memory://")
    log.append_raw(store.read_raw(0, 100_000))
    assert not can_split(log, 2)
    folded, _ = fold_side_by_side(log, PERSISTED, [None, None])
    assert [type(p) for p in folded] == list(PERSISTED)
    assert [p.digest() for p in folded] == [p.digest() for p in sequential(store)]
    store.close()


@pytest.mark.postgres
def test_side_by_side_on_postgresql_equals_one_after_the_other(tmp_path: Path) -> None:
    """The child opens the PostgreSQL log by its URL (its own pool); the parent's pool
    and connections are left alone across the fork."""
    from postgres import schema_url, temporary_schema

    source = imported("recovery", tmp_path)
    with temporary_schema() as schema:
        log = open_store(schema_url(schema))
        try:
            log.append_raw(source.read_raw(0, 100_000))
            assert can_split(log, len(PERSISTED))
            folded, position = fold_side_by_side(log, PERSISTED, [None, None])
            assert position == log.head().position == source.head().position
            assert isinstance(folded[1], FoldedRows)
            assert [p.digest() for p in folded] == [p.digest() for p in sequential(source)]
            # The parent's connections still work after the fork.
            assert log.read(0, 1)[0].position == 1
        finally:
            log.close()
    source.close()
