"""The keeper of a projection store opens with only its active Works in memory: quiet Works
(completed, failed, a standing Work waiting for input) are found on demand, exactly as a fold
of the log gives them, and forgotten again after each save."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stored_works import StoredWorks
from rota.projections.scheduler import SchedulerProjection
from rota.replay.rebuild import folded, rebuild, verify

from .test_projection_store import T0, StoredService, stored_service

DONE = [f"done-{n}" for n in range(8)]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "rota.db", clock=ManualClock(T0), synchronous="normal")
    yield store
    store.close()


def run_all(service: StoredService) -> None:
    """Start, invoke and complete whatever can start, until nothing can."""
    while claimed := service.lifecycle.start_pass(2).claimed:
        for claim in claimed:
            execution, epoch = claim.attempt.execution_id, claim.attempt.epoch
            service.lifecycle.invoke(execution, epoch)
            service.lifecycle.finish(execution, epoch, Result())


def populated(log: SQLiteStore) -> None:
    """Eight completed Works and a standing one waiting (quiet); one running and two ready
    (active); then the keeper saves and closes."""
    service = stored_service(log)
    for work_id in DONE:
        service.lifecycle.submit(
            SubmitWork(
                work_id=work_id, binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
    service.lifecycle.submit(
        SubmitWork(work_id="standing", binding="b", kind="standing", inputs=(WorkInput(None, "s"),))
    )
    run_all(service)
    service.lifecycle.submit(
        SubmitWork(work_id="live", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    claim = service.lifecycle.start_pass(1).claimed[0]
    service.lifecycle.invoke(claim.attempt.execution_id, claim.attempt.epoch)
    for work_id in ("ready-1", "ready-2"):
        service.lifecycle.submit(
            SubmitWork(
                work_id=work_id, binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
    service.close()


def reopened(log: SQLiteStore) -> tuple[StoredService, StoredWorks]:
    service = stored_service(log)
    works = service.projection.works
    assert isinstance(works, StoredWorks), "the keeper should open with quiet Works on disk"
    return service, works


def in_memory(works: StoredWorks) -> set[str]:
    return {work.work_id for work in works.in_memory()}


def test_only_the_active_works_are_loaded_at_open(log: SQLiteStore) -> None:
    populated(log)
    service, works = reopened(log)
    assert in_memory(works) == {"live", "ready-1", "ready-2"}
    assert service.projection.active_works() == {"live", "ready-1", "ready-2"}
    assert service.projection.startable == {"ready-1", "ready-2"}
    service.close()


def test_a_quiet_work_is_found_on_demand_as_the_log_gives_it(log: SQLiteStore) -> None:
    populated(log)
    service, works = reopened(log)
    fold, _ = folded(log)
    assert works["done-3"] == fold.works["done-3"]
    assert works.get("standing") == fold.works["standing"]
    assert "done-5" in works and "nobody" not in works and works.get("nobody") is None
    assert works.fetched == 3
    # Every Work at once (a listing, a digest): the same projection as a fold.
    assert len(works) == len(fold.works) == 12
    assert service.projection.digest() == fold.digest()
    service.close()


def test_events_for_quiet_works_apply_once_and_saving_forgets_them(log: SQLiteStore) -> None:
    populated(log)
    service, works = reopened(log)
    # Input for the waiting standing Work: read on demand (folded up to the position before
    # this event), then the event applied once.
    service.lifecycle.accept("standing", {"n": 2}, key="k2", correlation_key="c")
    service.lifecycle.submit(
        SubmitWork(work_id="done-1", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    assert {"standing", "done-1"} <= in_memory(works)
    fold, _ = folded(log)
    assert works["standing"] == fold.works["standing"]
    assert len(fold.works["standing"].pending) == 1
    assert service.projection.digest() == fold.digest()
    assert service.save_projections()
    # Saved: the quiet ones leave memory; the standing Work, now startable, stays.
    assert "done-1" not in in_memory(works) and "standing" in in_memory(works)
    run_all(service)
    service.close()
    service, works = reopened(log)
    fold, _ = folded(log)
    assert service.projection.digest() == fold.digest()
    service.close()


def test_a_store_rewritten_by_another_process_is_not_trusted(log: SQLiteStore) -> None:
    populated(log)
    service, works = reopened(log)
    at_open = service.projection.position
    # Another process appends (a Work completes its second turn) and rebuilds the store.
    other = stored_service(log)
    other.lifecycle.accept("standing", {"n": 3}, key="k3", correlation_key="c")
    run_all(other)
    other.close()
    path = default_path(log)
    assert path is not None
    with SQLiteProjectionStore(path) as store:
        rebuild(log, store)
    # This projection has not caught up: what it finds is the log as of its own position,
    # whether it reads every Work (folded, not read from the rewritten rows) or one.
    fold, _ = folded(log, upto=at_open)
    assert service.projection.digest() == fold.digest()
    assert works["standing"] == fold.works["standing"]
    service.close()


def test_events_another_process_appended_apply_once_to_quiet_works(log: SQLiteStore) -> None:
    populated(log)
    service, works = reopened(log)
    other = stored_service(log)  # not the keeper: appends to the same log
    other.lifecycle.accept("standing", {"n": 4}, key="k4", correlation_key="c")
    other.close()
    assert "standing" not in in_memory(works)
    service.catch_up()  # the keeper applies them: each quiet Work read as of before its event
    assert "standing" in in_memory(works)
    fold, _ = folded(log)
    assert works["standing"] == fold.works["standing"]
    assert service.projection.digest() == fold.digest()
    service.close()


def test_another_scheduler_on_the_store_holds_only_active_works(log: SQLiteStore) -> None:
    populated(log)
    keeper = stored_service(log)
    assert isinstance(keeper.projection.works, StoredWorks)
    second = stored_service(log, save_every=3)  # the store's lock is the keeper's
    assert second.stored is not None and not second.stored.writer
    works = second.projection.works
    assert isinstance(works, StoredWorks)
    assert in_memory(works) == {"live", "ready-1", "ready-2"}
    # A quiet Work read on demand, and one changed by this scheduler: after `save_every`
    # events the first is forgotten, the changed one kept (the store lacks its change).
    fold, _ = folded(log)
    assert works["done-2"] == fold.works["done-2"]
    second.lifecycle.accept("standing", {"n": 9}, key="k9", correlation_key="c")
    for work_id in ("new-1", "new-2"):
        second.lifecycle.submit(
            SubmitWork(
                work_id=work_id, binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
    assert "done-2" not in in_memory(works)
    assert {"standing", "new-1", "new-2"} <= in_memory(works)
    # The keeper catches up and saves; the second still finds every Work exactly.
    keeper.catch_up()
    assert keeper.save_projections()
    fold, _ = folded(log)
    assert len(works) == len(fold.works) == 14
    assert second.projection.digest() == fold.digest()
    second.close()
    keeper.close()


def test_a_fresh_fold_holds_plain_works() -> None:
    assert type(SchedulerProjection().works) is dict


def test_a_keeper_that_folded_from_position_zero_forgets_quiet_works_after_saving(
    log: SQLiteStore,
) -> None:
    service = stored_service(log)  # nothing stored yet: folded from position 0
    assert type(service.projection.works) is dict
    for work_id in DONE:
        service.lifecycle.submit(
            SubmitWork(
                work_id=work_id, binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
    run_all(service)
    service.lifecycle.submit(
        SubmitWork(work_id="ready", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    assert service.save_projections()
    works = service.projection.works
    assert isinstance(works, StoredWorks)
    assert in_memory(works) == {"ready"}
    fold, _ = folded(log)
    assert works["done-0"] == fold.works["done-0"]
    assert service.projection.digest() == fold.digest()
    service.close()


def test_a_whole_save_after_another_process_rebuilt_keeps_every_work(log: SQLiteStore) -> None:
    populated(log)
    service, _ = reopened(log)
    path = default_path(log)
    assert path is not None
    with SQLiteProjectionStore(path) as other:
        rebuild(log, other)  # a new generation: the keeper's next save writes every row
    service.lifecycle.submit(
        SubmitWork(work_id="later", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    assert service.save_projections()
    service.close()
    with SQLiteProjectionStore(path) as store:
        assert verify(log, store).ok
        _, rows = store.rows("scheduler")
        assert {key for key, _ in rows if key.startswith("work/")} == {
            f"work/{w}" for w in [*DONE, "standing", "live", "ready-1", "ready-2", "later"]
        }


class CountedReads:
    """Counts the log's one-stream and many-stream reads (a wrapper on the store's methods)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: SQLiteStore) -> None:
        self.one = self.many = 0
        read_stream, read_streams = log.read_stream, log.read_streams

        def one(stream: str, after: int = 0) -> list[Any]:
            self.one += 1
            return read_stream(stream, after)

        def many(streams: Sequence[str]) -> dict[str, list[Any]]:
            self.many += 1
            return read_streams(streams)

        monkeypatch.setattr(log, "read_stream", one)
        monkeypatch.setattr(log, "read_streams", many)


def test_a_bulk_submit_finds_the_works_it_names_in_one_log_read(
    log: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    populated(log)
    service, works = reopened(log)
    reads = CountedReads(monkeypatch, log)
    # A quiet Work (the standing one, more input) and three new ones, in one submit.
    items = [
        SubmitWork(work_id=w, binding="b", inputs=(WorkInput({"n": w}),))
        for w in ("new-1", "new-2")
    ]
    items += [
        SubmitWork(work_id="standing", binding="b", kind="standing", inputs=(WorkInput({"n": 2}),)),
        SubmitWork(work_id="new-3", binding="b", inputs=(WorkInput(None),)),
    ]
    service.lifecycle.submit_many(items)
    assert (reads.one, reads.many) == (0, 1)
    assert {"standing", "new-1", "new-2", "new-3"} <= in_memory(works)
    fold, _ = folded(log)
    assert works["standing"] == fold.works["standing"]
    assert len(fold.works["standing"].pending) == 1
    assert service.projection.digest() == fold.digest()
    service.close()


def test_a_work_found_absent_is_looked_for_again_after_a_forget(
    log: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    populated(log)
    service, works = reopened(log)
    reads = CountedReads(monkeypatch, log)
    works.prefetch(["ghost", "done-4", "live"])  # absent, quiet, held
    assert (reads.one, reads.many) == (0, 1)
    assert works.get("ghost") is None and "ghost" not in works
    assert "done-4" in in_memory(works)
    assert reads.one == 0  # the absent one is remembered: nothing read
    works.forget(service.projection.active_works())
    assert works.get("ghost") is None
    assert reads.one == 1  # forgotten with the rest: read again
    service.close()


def test_a_work_another_process_created_after_a_prefetch_is_found(log: SQLiteStore) -> None:
    populated(log)
    service, works = reopened(log)
    works.prefetch(["late"])
    other = stored_service(log)  # not the keeper: appends to the same log
    other.lifecycle.submit(
        SubmitWork(work_id="late", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    other.close()
    # The keeper's own submit of the same Work conflicts, catches up and sees it.
    service.lifecycle.submit_many(
        [SubmitWork(work_id="late", binding="b", inputs=(WorkInput(None),))]
    )
    fold, _ = folded(log)
    assert works["late"] == fold.works["late"]
    assert service.projection.digest() == fold.digest()
    service.close()


def test_a_pass_looks_up_no_quiet_work_for_the_ready_entries_it_left(log: SQLiteStore) -> None:
    """The Works a pass found ready and claimed leave no entry in the ready order that a
    later pass would look up once they are quiet and forgotten (each such lookup would fold
    the Work from the log)."""
    populated(log)
    service, works = reopened(log)
    claimed = service.lifecycle.start_pass(2).claimed  # one slot is free ("live" holds one)
    assert [claim.attempt.work_id for claim in claimed] == ["ready-1"]
    for claim in claimed:
        execution, epoch = claim.attempt.execution_id, claim.attempt.epoch
        service.lifecycle.invoke(execution, epoch)
        service.lifecycle.finish(execution, epoch, Result())
    assert service.save_projections()  # completed, saved and forgotten: quiet
    assert in_memory(works) == {"live", "ready-2"}
    before = works.fetched
    for work_id in ("ready-3", "ready-4"):
        service.lifecycle.submit(
            SubmitWork(
                work_id=work_id, binding="b", kind="run-once", inputs=(WorkInput(None, "s"),)
            )
        )
    run_all(service)
    assert works.fetched == before
    assert "ready-1" not in in_memory(works)
    service.close()
