"""A rebuild folds in bounded memory: finished Works (and history rows) spill to a scratch
file as the fold goes, a spilled Work touched again is read back, and the projection that
reaches the store equals the one folded in memory and the one maintained live (same
digest, same rows)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rota.application.service import SchedulerService
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure import spill
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.spill import SpilledWorks, Spiller, SpillFile
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.projections import PERSISTED, HistoryProjection, SchedulerProjection
from rota.replay import rebuild as rebuild_module
from rota.replay.rebuild import fold, fold_spilling, rebuild, verify

from .test_projection_property import _service

DONE = 40
RUNNING = 3


def busy_log(path: Path) -> SchedulerService:
    """Forty Works run to completion with usage charged against budgets (each quiet soon
    after its submit), a standing Work that gets input again at the end (read back from the
    spill), three attempts left running and renewed, and one failed Work waiting on its
    retry timer (active: it names an index)."""
    clock = ManualClock(datetime(2026, 7, 1, tzinfo=UTC))
    service = _service(path, clock)
    lifecycle = service.lifecycle
    lifecycle.submit(
        SubmitWork(
            work_id="standing", binding="b", kind="standing", inputs=(WorkInput(None, "s0"),)
        )
    )
    for n in range(DONE):
        lifecycle.submit(
            SubmitWork(
                work_id=f"w{n:03d}", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
        for claim in lifecycle.start_pass(2).claimed:
            execution, epoch = claim.attempt.execution_id, claim.attempt.epoch
            lifecycle.invoke(execution, epoch)
            lifecycle.finish(execution, epoch, Result(usage={"tokens": 1.0}))
        clock.advance(1)
    lifecycle.submit(
        SubmitWork(work_id="retrying", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    claim = lifecycle.start_pass(1).claimed[0]
    lifecycle.invoke(claim.attempt.execution_id, claim.attempt.epoch)
    lifecycle.finish(
        claim.attempt.execution_id,
        claim.attempt.epoch,
        Result(outcome="failed", error_code="boom", retry_at=clock.now().replace(year=2027)),
    )
    for n in range(RUNNING):
        lifecycle.submit(
            SubmitWork(
                work_id=f"run{n}", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
    running = lifecycle.start_pass(RUNNING).claimed
    for claim in running:
        lifecycle.invoke(claim.attempt.execution_id, claim.attempt.epoch)
    for _ in range(4):
        clock.advance(5)
        for claim in running:
            lifecycle.renew(claim.attempt.execution_id, claim.attempt.epoch)
    lifecycle.accept("standing", {"again": True}, key="s1", correlation_key="c")
    return service


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 7 events and at most 4 Works (or history rows) held before spilling."""
    monkeypatch.setattr(rebuild_module, "PAGE", 7)
    monkeypatch.setattr(spill, "HOLD", 4)


def test_a_spilled_fold_holds_few_works_and_equals_the_live_projection(
    tmp_path: Path, small_pages: None
) -> None:
    service = busy_log(tmp_path / "rota.db")
    live = service.projection.digest()
    scheduler = SchedulerProjection()
    spiller = Spiller(scheduler, SpillFile(tmp_path / "scheduler.spill"))
    fold(service.store, [scheduler], after_page=spiller.page_done)
    works = scheduler.works
    assert isinstance(works, SpilledWorks)
    assert works.read_back >= 1, "the standing Work's late input reads it back"
    rows = spiller.finish()
    assert rows.digest() == live
    # Held at most: the hold, or twice the active Works, plus one page's new Works.
    assert spiller.peak <= 2 * (RUNNING + 2) + 7 < DONE
    in_memory = SchedulerProjection()
    fold(service.store, [in_memory])
    assert in_memory.digest() == live
    stored = dict(zip(rows.row_keys(), map(rows.row, rows.row_keys()), strict=True))
    assert stored == {key: in_memory.row(key) for key in in_memory.row_keys()}
    assert in_memory.active_works() == {"retrying", "run0", "run1", "run2", "standing"}
    rows.spill.close()


def test_a_spilled_history_fold_equals_the_one_in_memory(tmp_path: Path, small_pages: None) -> None:
    service = busy_log(tmp_path / "rota.db")
    history = HistoryProjection()
    spiller = Spiller(history, SpillFile(tmp_path / "history.spill"))
    fold(service.store, [history], after_page=spiller.page_done)
    rows = spiller.finish()
    whole = HistoryProjection()
    fold(service.store, [whole])
    assert rows.digest() == whole.digest()
    assert rows.row_count == sum(1 for _ in whole.row_keys()) > 2 * DONE
    assert spiller.peak <= 2 * 4 + 2 * 7  # rows: a Work's and its attempt's per event
    rows.spill.close()


def test_rebuild_spills_and_stores_what_verify_accepts(
    tmp_path: Path, small_pages: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its own temporary directory: other processes' rebuilds may be spilling in the shared one.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(rebuild_module.tempfile, "tempdir", str(temporary))
    service = busy_log(tmp_path / "rota.db")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    fresh, _ = fold_spilling(service.store, PERSISTED, [None, None], spill=scratch)
    assert [p.peak_held for p in fresh] and all(0 < p.peak_held < 30 for p in fresh)
    assert fresh[0].digest() == service.projection.digest()
    for projection in fresh:
        projection.spill.close()
    with SQLiteProjectionStore(tmp_path / "rota.db.projections") as store:
        report = rebuild(service.store, store)
        assert report.digests["scheduler"] == service.projection.digest()
        whole = SchedulerProjection()
        fold(service.store, [whole])
        assert report.rows["scheduler"] == sum(1 for _ in whole.row_keys()) > DONE
        assert verify(service.store, store).ok
        loaded = store.load_scheduler(service.store)
        assert loaded is not None and loaded.digest() == service.projection.digest()
    assert not list(Path(rebuild_module.tempfile.gettempdir()).glob("rota-rebuild-*/*.spill"))


@pytest.mark.parametrize(("page", "hold"), [(1, 1), (2, 3), (3, 2), (5, 1), (7, 6), (11, 2)])
def test_a_history_fold_that_keeps_its_newest_rows_equals_the_one_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int, hold: int
) -> None:
    """Differential: whatever the page and the hold, the rows a spill keeps in memory
    unwritten (and writes when they go) and those it reads back give the very rows and
    digest of a fold held whole."""
    monkeypatch.setattr(rebuild_module, "PAGE", page)
    service = busy_log(tmp_path / "rota.db")
    history = HistoryProjection()
    spiller = Spiller(history, SpillFile(tmp_path / "history.spill"), hold=hold)
    fold(service.store, [history], after_page=spiller.page_done)
    rows = spiller.finish()
    whole = HistoryProjection()
    fold(service.store, [whole])
    assert rows.digest() == whole.digest()
    stored = dict(zip(rows.row_keys(), map(rows.row, rows.row_keys()), strict=True))
    assert stored == {key: whole.row(key) for key in whole.row_keys()}
    assert not history.dirty, "every changed row was written"
    assert spiller.peak <= 2 * hold + 2 * page
    rows.spill.close()


def test_a_spilled_fold_looks_up_no_work_for_a_streams_first_event(
    tmp_path: Path, small_pages: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first event of a Work's stream has no Work before it: the bulk fold asks the
    spill (its Bloom filter, maybe a query) only about Works that may have been spilled."""
    service = busy_log(tmp_path / "rota.db")
    asked: list[str] = []
    fetch = SpilledWorks._fetch

    def counted(self: SpilledWorks, work_id: str) -> object:
        asked.append(work_id)
        return fetch(self, work_id)

    monkeypatch.setattr(SpilledWorks, "_fetch", counted)
    scheduler = SchedulerProjection()
    spiller = Spiller(scheduler, SpillFile(tmp_path / "scheduler.spill"))
    fold(service.store, [scheduler], after_page=spiller.page_done)
    firsts = [r for r in service.store.read(0, 10_000) if r.stream.startswith("work/")]
    submitted = {r.stream[5:] for r in firsts if r.version == 1}
    # Each lookup is of a Work that missed the held dict after its first event: never one
    # per Work submitted (as when every first event asked too).
    assert len(asked) < len(submitted)
    assert spiller.finish().digest() == service.projection.digest()


def test_a_fold_runs_the_cyclic_collector_less_often(tmp_path: Path) -> None:
    import gc

    service = busy_log(tmp_path / "rota.db")
    before = gc.get_threshold()
    seen: list[int] = []
    fold(
        service.store,
        [SchedulerProjection()],
        after_page=lambda: seen.append(gc.get_threshold()[0]),
    )
    assert seen and all(t == rebuild_module.FOLD_GC_THRESHOLD for t in seen)
    assert gc.get_threshold() == before, "restored after the fold"


def test_a_history_spill_writes_the_changed_rows_it_no_longer_holds(tmp_path: Path) -> None:
    """`spill` encodes the rows it holds straight from their records; a changed row that is
    not held (evicted after it changed) is still written, as the loader gives it, and every
    row goes out in key order."""
    service = busy_log(tmp_path / "rota.db")
    whole = HistoryProjection()
    fold(service.store, [whole])
    stored = {key: whole.row(key) for key in whole.row_keys()}
    history = HistoryProjection(loader=stored.get)
    fold(service.store, [history])
    assert history.dirty == set(stored)
    history.evict(keep={"w000", "w001"})  # the rest is no longer held, but still changed
    saved: list[tuple[str, bytes]] = []
    history.spill(saved.extend, keep=2)
    kept = history.dirty
    assert len(kept) == 2 and all(key in history.row_keys() for key in kept)
    assert [key for key, _ in saved] == sorted(set(stored) - kept)
    assert dict(saved) == {key: stored[key] for key in set(stored) - kept}
