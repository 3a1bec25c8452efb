"""The projection store: save and load round trips, refusals, catch-up, atomic rebuild, and
(property) saved-then-continued projections equal a fold of the log from position 0."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trial_scale import scale

from rota.application.ports import LogHead
from rota.application.service import SchedulerService
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.projection_store import (
    SQLiteProjectionStore,
    default_path,
    log_hash_at,
)
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import HistoryProjection, SchedulerProjection
from rota.replay.rebuild import fold, rebuild, verify

from .test_projection_property import BUDGETS, _run, command
from .test_projection_property import _service as _plain_service

T0 = datetime(2026, 7, 1, tzinfo=UTC)


class StoredService(SchedulerService):
    """The service wired to a projection store, as `rota.open` wires it; `close()` saves a
    last time and closes the store."""

    def close(self) -> None:
        self.close_projections()


def stored_service(log: SQLiteStore, save_every: int = 5000) -> StoredService:
    template = _plain_service_settings()
    service = StoredService(
        log,
        projections=SQLiteProjectionStore(default_path(log) or "x"),
        save_every=save_every,
        **template,
    )
    service.catch_up()
    service.admission.configure_budgets(BUDGETS)
    return service


def _plain_service_settings() -> dict[str, Any]:
    from rota.domain.policy import Binding, Registration, RetryPolicy, Settings

    return {
        "settings": Settings(concurrency=2, lease_seconds=60, timeout_seconds=300),
        "owner": "prop",
        "bindings": {"b": Binding(name="b", executor="x", retry=RetryPolicy(max_attempts=3))},
        "registrations": {"x": Registration(name="x")},
    }


def folded(log: SQLiteStore) -> tuple[SchedulerProjection, HistoryProjection]:
    scheduler, history = SchedulerProjection(), HistoryProjection()
    fold(log, [scheduler, history])
    return scheduler, history


STEPS: list[tuple[object, ...]] = [
    ("submit", "a", "run-once"),
    ("submit", "b", "standing"),
    ("accept", "b", 1),
    ("start", 4),
    ("invoke", "a"),
    ("finish", "a", 1),
    ("advance", 400),
    ("fire",),
    ("finish", "b", 7),
    ("settle",),
    ("accept", "b", 2),
    ("start", 4),
    ("submit", "c", "run-once"),
    ("start", 4),
    ("advance", 61),
    ("timeout", "c"),
]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "rota.db", clock=ManualClock(T0), synchronous="normal")
    yield store
    store.close()


def run(service: SchedulerService, steps: Sequence[tuple[object, ...]]) -> None:
    clock = service.store.clock  # type: ignore[attr-defined]
    for step in steps:
        _run(service, clock, step)


def test_default_path_sits_beside_the_log(log: SQLiteStore) -> None:
    assert default_path(log) == Path(f"{log.path}.projections")
    assert default_path("sqlite:////var/lib/rota/rota.db") == Path(
        "/var/lib/rota/rota.db.projections"
    )
    assert default_path("postgresql://localhost/rota") is None


def test_a_new_file_has_8_kib_pages_and_an_older_one_keeps_its_own(tmp_path: Path) -> None:
    import apsw

    new = tmp_path / "new.projections"
    with SQLiteProjectionStore(new):
        pass
    older = tmp_path / "older.projections"
    conn = apsw.Connection(str(older))
    conn.execute("PRAGMA page_size=4096")
    conn.execute("CREATE TABLE t (x)")  # the page size is fixed by the first write
    conn.close()
    with SQLiteProjectionStore(older) as store:
        store.save(SchedulerProjection(), LogHead(position=0, hash=GENESIS_HEX))
    for path, size in ((new, 8192), (older, 4096)):
        conn = apsw.Connection(str(path))
        assert conn.execute("PRAGMA page_size").fetchone() == (size,)
        conn.close()


def test_save_then_load_equals_the_live_projection(log: SQLiteStore) -> None:
    service = stored_service(log)
    run(service, STEPS)
    assert service.save_projections()
    live_digest = service.projection.digest()
    service.close()
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        loaded = projections.load_scheduler(log)
        history = projections.load_history(log)
        assert loaded is not None and history is not None, projections.last_refusal
        assert loaded.digest() == live_digest
        scheduler, fresh_history = folded(log)
        assert loaded.digest() == scheduler.digest()
        assert history.digest() == fresh_history.digest()
        # The indices the cadence reads are derived exactly as the fold derives them.
        assert loaded.startable == scheduler.startable
        assert loaded.slots == scheduler.slots
        assert loaded.live == scheduler.live
        assert loaded.timers == scheduler.timers
        assert loaded.slot_scopes == scheduler.slot_scopes
        assert [w.work_id for w in loaded.ready_order()] == [
            w.work_id for w in scheduler.ready_order()
        ]
        meta = projections.meta("scheduler")
        assert meta is not None and meta.position == log.head().position
        assert meta.log_hash == log.head().hash


def test_a_save_writes_only_the_rows_that_changed(log: SQLiteStore) -> None:
    service = stored_service(log)
    run(service, STEPS)
    service.save_projections()
    assert not service.projection.dirty
    service.lifecycle.accept("b", {"n": 9}, key="k9")
    # The Work's row, and the list of active Works (which a store-backed open loads).
    assert service.projection.dirty == {"work/b", "active"}
    assert service.stored is not None
    written = service.stored.store.save(service.projection, log)
    assert written == 2
    service.close()


def test_an_attempt_event_writes_the_history_of_the_work_only_when_it_changes(
    log: SQLiteStore,
) -> None:
    service = stored_service(log)
    run(service, [("submit", "a", "run-once"), ("start", 1)])
    service.save_projections()
    assert service.stored is not None and service.stored.history is not None
    history = service.stored.history
    assert not history.dirty
    run(service, [("invoke", "a")])
    # The invoke marker is the attempt's: the Work's own record is as saved.
    assert history.dirty == {"attempt/a/1"}
    run(service, [("finish", "a", 1)])  # a failure: the Work's record counts it
    assert history.dirty == {"attempt/a/1", "work/a"}
    service.close()
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        stored = projections.load_history(log)
        assert stored is not None, projections.last_refusal
        assert stored.digest() == folded(log)[1].digest()


def test_the_rows_a_save_writes_are_each_keys_row(log: SQLiteStore) -> None:
    """`rows_of(keys)` (what a save iterates) gives `row(key)` for every key, in order, for
    rows held, rows the store holds and keys whose row does not exist."""
    service = stored_service(log, save_every=3)  # quiet Works on disk between saves
    run(service, STEPS)
    assert service.stored is not None and service.stored.history is not None
    missing = ["work/zz", "attempt/zz/1", "attempt/a/x", "attempt/a/9"]
    for projection in (service.projection, service.stored.history):
        keys = sorted({*projection.row_keys(), *projection.dirty, "work/a", "work/c"})
        keys += missing[: 1 if projection is service.projection else 4]
        assert list(projection.rows_of(keys)) == [(key, projection.row(key)) for key in keys]
    service.close()


def test_loading_reads_no_events_whatever_the_log_length(log: SQLiteStore) -> None:
    service = stored_service(log)
    run(service, STEPS * 3)
    service.close()
    calls: list[str] = []
    read, read_raw = log.read, log.read_raw
    log.read = lambda *a, **k: calls.append("read") or read(*a, **k)  # type: ignore[method-assign]
    log.read_raw = lambda *a, **k: calls.append("raw") or read_raw(*a, **k)  # type: ignore[method-assign]
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        assert projections.load_scheduler(log) is not None
    # No event is read: only the stored hash at its position, before and after the rows.
    assert calls == ["raw", "raw"]


def test_a_version_bump_rebuilds_on_open(log: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    service = stored_service(log)
    run(service, STEPS)
    service.close()
    monkeypatch.setattr(SchedulerProjection, "version", SchedulerProjection.version + 1)
    monkeypatch.setattr(HistoryProjection, "version", HistoryProjection.version + 1)
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        assert projections.load_scheduler(log) is None
        assert "fold version" in (projections.last_refusal or "")
    # Opening the service folds from 0, and its saves replace the old rows.
    reopened = stored_service(log)
    scheduler, history = folded(log)
    assert reopened.projection.digest() == scheduler.digest()
    reopened.close()
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        loaded = projections.load_scheduler(log)
        stored_history = projections.load_history(log)
        assert loaded is not None and loaded.digest() == scheduler.digest()
        assert stored_history is not None and stored_history.digest() == history.digest()


def test_a_projection_of_another_log_is_refused(tmp_path: Path, log: SQLiteStore) -> None:
    service = stored_service(log)
    run(service, STEPS)
    service.close()
    other = SQLiteStore(tmp_path / "other.db", clock=ManualClock(T0), synchronous="normal")
    try:
        with SQLiteProjectionStore(default_path(log) or "") as projections:
            # Shorter than the stored position: refused.
            assert projections.load_scheduler(other) is None
            assert "log ends at" in (projections.last_refusal or "")
            # As long, but another log: the hash at the stored position differs.
            later = ManualClock(T0.replace(day=2))  # the same decisions, another day
            run(_plain_service(tmp_path / "other.db", later), STEPS * 2)
            assert other.head().position >= log.head().position
            assert projections.load_scheduler(other) is None
            assert "hash" in (projections.last_refusal or "")
            assert projections.load_scheduler(log) is not None
    finally:
        other.close()


def test_catch_up_from_a_saved_position_equals_a_full_replay(log: SQLiteStore) -> None:
    service = stored_service(log)
    run(service, STEPS[:8])
    service.close()
    saved_at = log.head().position
    # More decisions by a scheduler without a projection store.
    plain = SchedulerService(log, **_plain_service_settings())
    plain.catch_up()
    run(plain, STEPS[8:])
    assert log.head().position > saved_at
    reopened = stored_service(log)
    scheduler, history = folded(log)
    assert reopened.projection.digest() == scheduler.digest()
    reopened.close()
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        stored = projections.load_history(log)
        assert stored is not None and stored.digest() == history.digest()


def test_rebuild_swaps_atomically(log: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    service = stored_service(log)
    run(service, STEPS[:6])
    service.close()
    path = default_path(log) or ""
    with SQLiteProjectionStore(path) as projections:
        before_meta = projections.metas()
        before_rows = {n: projections.rows(n)[1] for n in ("scheduler", "history")}
    plain = SchedulerService(log, **_plain_service_settings())
    plain.catch_up()
    run(plain, STEPS[6:])
    row = SchedulerProjection.row
    calls = [0]

    def crashing(self: SchedulerProjection, key: str) -> bytes | None:
        calls[0] += 1
        if calls[0] == 5:
            raise RuntimeError("crash inside the swap")
        return row(self, key)

    monkeypatch.setattr(SchedulerProjection, "row", crashing)
    with SQLiteProjectionStore(path) as projections, pytest.raises(RuntimeError, match="crash"):
        rebuild(log, projections)
    monkeypatch.setattr(SchedulerProjection, "row", row)
    with SQLiteProjectionStore(path) as projections:
        assert projections.metas() == before_meta
        assert {n: projections.rows(n)[1] for n in before_rows} == before_rows
        report = rebuild(log, projections)
        assert report.position == log.head().position
        scheduler, history = folded(log)
        assert report.digests == {"scheduler": scheduler.digest(), "history": history.digest()}
        meta = projections.meta("scheduler")
        assert meta is not None and meta.rebuilt_at is not None
        assert meta.digest == scheduler.digest()
        assert meta.log_hash == log_hash_at(log, log.head().position)


def test_a_second_scheduler_on_the_log_loads_but_never_saves(log: SQLiteStore) -> None:
    first = stored_service(log)
    run(first, STEPS[:6])
    assert first.save_projections()
    second = stored_service(log)
    assert second.stored is not None and not second.stored.writer
    assert second.projection.digest() == first.projection.digest()
    run(second, STEPS[6:])
    assert not second.save_projections()
    second.close()
    first.catch_up()
    assert first.save_projections()
    first.close()
    with SQLiteProjectionStore(default_path(log) or "") as projections:
        assert verify(log, projections).ok
        meta = projections.meta("scheduler")
        assert meta is not None and meta.position == log.head().position


def test_a_scheduler_after_a_rebuild_by_another_process_writes_whole(log: SQLiteStore) -> None:
    service = stored_service(log)
    run(service, STEPS[:6])
    service.save_projections()
    with SQLiteProjectionStore(default_path(log) or "") as other:
        rebuild(log, other)
    run(service, STEPS[6:])
    assert service.save_projections()
    service.close()
    assert verify(log, SQLiteProjectionStore(default_path(log) or "")).ok


# -- property: saved, reloaded and continued projections equal a fold from position 0 ---

step = st.one_of(command, st.just(("save",)), st.just(("reopen",)))


@settings(
    max_examples=scale(40, 500, "ROTA_EXAMPLES"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(step, min_size=1, max_size=40), st.sampled_from([1, 3, 5000]))
def test_saved_and_continued_projections_equal_a_rebuild(
    steps: list[tuple[object, ...]], save_every: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = SQLiteStore(Path(tmp) / "rota.db", clock=ManualClock(T0), synchronous="normal")
        service = stored_service(log, save_every)
        try:
            for item in steps:
                if item[0] == "save":
                    service.save_projections()
                elif item[0] == "reopen":
                    service.close()
                    service = stored_service(log, save_every)
                else:
                    _run(service, log.clock, item)  # type: ignore[arg-type]
            scheduler, history = folded(log)
            assert service.projection.digest() == scheduler.digest()
            # The keeper's indices (quiet Works possibly on disk) are the fold's.
            live = service.projection
            assert (live.startable, live.live, live.timers) == (
                scheduler.startable,
                scheduler.live,
                scheduler.timers,
            )
            assert live.slot_scopes == scheduler.slot_scopes
            assert {p: s for p, s in live.slots.items() if s} == {
                p: s for p, s in scheduler.slots.items() if s
            }
            service.close()
            with SQLiteProjectionStore(Path(tmp) / "rota.db.projections") as projections:
                loaded = projections.load_scheduler(log)
                stored_history = projections.load_history(log)
                assert loaded is not None, projections.last_refusal
                assert stored_history is not None, projections.last_refusal
                assert loaded.digest() == scheduler.digest()
                assert stored_history.digest() == history.digest()
                # Every index the cadence reads is derived as the fold derives it.
                assert loaded.startable == scheduler.startable
                assert loaded.slots == scheduler.slots
                assert loaded.live == scheduler.live
                assert loaded.timers == scheduler.timers
                assert loaded.slot_scopes == scheduler.slot_scopes
                ready = [w.work_id for w in scheduler.ready_order()]
                assert [w.work_id for w in loaded.ready_order()] == ready
                assert verify(log, projections).ok
        finally:
            service.close()
            log.close()
