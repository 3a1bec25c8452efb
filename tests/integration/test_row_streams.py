"""`rota replay verify` and `rota doctor` in bounded memory: the stored rows streamed in key
order (SQLite and PostgreSQL), digested as they stream (equal to `digest()`), the first
difference found by a merge-walk, an undecodable row named, and the verdicts and checks of
spilled folds equal to those of folds held in memory."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres import schema_url, temporary_schema

import rota
from rota.application.configuration import Configuration
from rota.application.ports import EventStore, ProjectionStore
from rota.application.queries.capacity import capacity_view
from rota.infrastructure import spill
from rota.infrastructure.executors import builtin_registrations
from rota.infrastructure.projection_stores import open_projection_store
from rota.infrastructure.stores import open_store
from rota.projections import DERIVED, PERSISTED, HistoryProjection, SchedulerProjection
from rota.replay.doctor import doctor
from rota.replay.rebuild import first_difference, fold, rebuild, verify
from rota.replay.row_streams import (
    canonical_rows,
    first_mismatch,
    read_history,
    read_scheduler,
)
from rota.replay.state_checks import (
    BUDGET_ADVICE,
    CRASH_LOOP_ADVICE,
    check_capacity,
    check_holds,
    check_leases,
    check_timers,
)

from .test_doctor import _troubled
from .test_pg_projections import tamper as tamper_schema
from .test_replay import tamper as tamper_file

CONFIG = {"settings": {"concurrency": 2}}
Tamper = Callable[[str, str, str, str], None]


def _echo(ctx: rota.LaunchContext) -> dict[str, Any]:
    return {"n": ctx.trigger.get("n")}


def populate(target: str | Path) -> None:
    """Completed Works (quiet), and ready ones that never ran (active), then a rebuild."""
    with rota.open(target, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        for n in range(12):
            scheduler.submit(f"w{n:02d}", binding="echo", input={"n": n})
        scheduler.run_until_idle(timeout=30)
    with rota.open(target, config={"settings": {"concurrency": 0}}) as scheduler:
        scheduler.register("echo", _echo)
        for n in range(3):
            scheduler.submit(f"r{n}", binding="echo", input={"n": n})


@contextlib.contextmanager
def _rebuilt(log: Any) -> Iterator[Any]:
    """`log`'s projection store, rebuilt from the log; closed after the block."""
    projections = open_projection_store(log)
    assert projections is not None
    try:
        rebuild(log, projections)
        yield projections
    finally:
        projections.close()


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any, Tamper]]:
    """(log, projection store, tamper(projection, key, old, new)) on either backend."""
    if request.param == "sqlite":
        target: str | Path = tmp_path / "rota.db"
        tamper = functools.partial(tamper_file, tmp_path / "rota.db.projections")
        populate(target)
        with open_store(str(target)) as log, _rebuilt(log) as projections:
            yield log, projections, tamper
        return
    with temporary_schema() as schema:
        url = schema_url(schema)

        def tamper_pg(projection: str, key: str, old: str, new: str) -> None:
            tamper_schema(schema, key, old, new, projection)

        populate(url)
        with open_store(url) as log, _rebuilt(log) as projections:
            yield log, projections, tamper_pg


@pytest.fixture
def small_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folds spill every quiet Work (history: every row) after each page."""
    monkeypatch.setattr(spill, "HOLD", 1)


def _loaded(projections: ProjectionStore, kind: Any) -> Any:
    meta, rows = projections.rows(kind.name)
    assert meta is not None
    return kind.from_rows(meta.position, rows)


def _in_memory_verdicts(log: EventStore, projections: ProjectionStore) -> dict[str, Any]:
    """What verify found before it streamed: every row loaded, the fold held in memory."""
    stored = {kind.name: _loaded(projections, kind) for kind in PERSISTED}
    fresh = {kind.name: kind() for kind in PERSISTED}
    fold(log, list(fresh.values()), upto=[stored[name].position for name in fresh])
    pairs = [(name, stored[name], fresh[name]) for name in fresh]
    pairs += [(d.name, d(stored["scheduler"]), d(fresh["scheduler"])) for d in DERIVED]
    found = {}
    for name, ours, theirs in pairs:
        same = ours.digest() == theirs.digest()
        key = None if same else first_difference(ours, theirs)
        found[name] = ("ok" if same else "drift", ours.digest(), theirs.digest(), key)
    return found


def _verdicts(log: EventStore, projections: ProjectionStore) -> dict[str, Any]:
    report = verify(log, projections)
    return {
        v.name: (v.status, v.stored_digest, v.rebuilt_digest, v.first_key)
        for v in report.projections
    }


# -- streamed reading -----------------------------------------------------------------------


def test_rows_stream_in_key_order_and_their_digest_is_the_loaded_projections(
    stores: tuple[Any, Any, Tamper],
) -> None:
    _, projections, _ = stores
    for kind, read in ((SchedulerProjection, read_scheduler), (HistoryProjection, read_history)):
        meta, rows = projections.rows(kind.name)
        assert meta is not None
        with projections.snapshot(), contextlib.closing(projections.sorted_rows(kind.name)) as s:
            streamed = list(s)
        assert [key for key, _ in streamed] == sorted(key for key, _ in rows)
        reading = read(meta.position, iter(streamed))
        assert reading.decoded
        assert reading.digest == kind.from_rows(meta.position, rows).digest()


def test_the_first_difference_is_found_by_a_merge_walk_on_either_store(
    stores: tuple[Any, Any, Tamper], small_hold: None
) -> None:
    log, projections, tamper = stores
    assert verify(log, projections).ok
    tamper("scheduler", "work/w05", '"work_id":"w05"', '"work_id":"w05","budget_pass":true')
    tamper("history", "attempt/w07/1", '"epoch":1', '"epoch":2')
    expected = _in_memory_verdicts(log, projections)
    found = _verdicts(log, projections)
    assert found == expected
    assert found["scheduler"][0] == "drift" and found["scheduler"][3] == "work/w05"
    assert found["history"][0] == "drift" and found["history"][3] == "attempt/w07/1"


def test_an_undecodable_row_is_named_on_either_store(stores: tuple[Any, Any, Tamper]) -> None:
    log, projections, tamper = stores
    tamper("scheduler", "work/w03", '"work_id"', '"work_id":')
    tamper("history", "work/w09", '"work_id"', '"work_id":')
    by_name = {v.name: v for v in verify(log, projections).projections}
    assert by_name["scheduler"].status == "drift"
    assert by_name["scheduler"].first_key == "work/w03"
    assert by_name["scheduler"].detail == "a row cannot be decoded"
    assert by_name["history"].first_key == "work/w09"
    assert "capacity" not in by_name  # compared through a scheduler projection that decodes


def test_a_spilled_folds_verdicts_equal_the_in_memory_ones_with_held_and_active_works(
    tmp_path: Path, small_hold: None
) -> None:
    service, _ = _troubled(tmp_path / "rota.db")
    log = service.store
    with _rebuilt(log) as projections:
        assert _verdicts(log, projections) == _in_memory_verdicts(log, projections)
        assert verify(log, projections).ok
        # A held Work that is quiet (spilled by the fold) whose stored hold is gone: the
        # derived `holds` view differs, and names it, as when both were held whole.
        tamper_file(
            Path(projections.where), "scheduler", "work/spend", '"kind":"budget"', '"kind":"gate"'
        )
        expected = _in_memory_verdicts(log, projections)
        assert expected["holds"][0] == "drift" and expected["holds"][3] == "work/spend"
        assert _verdicts(log, projections) == expected
    log.close()


def test_doctors_state_checks_on_a_spilled_state_equal_those_of_the_state_in_memory(
    tmp_path: Path, small_hold: None
) -> None:
    service, clock = _troubled(tmp_path / "rota.db")
    log = service.store
    with _rebuilt(log):
        pass  # the projection file, rebuilt and closed: what doctor reads
    state = SchedulerProjection()
    fold(log, [state])
    now = log.now()
    pinned = [a.pinned for w in state.works.values() for a in w.attempts]
    configuration = Configuration(
        settings=service.settings,
        owner="doctor",
        bindings={p.binding.name: p.binding for p in pinned},
        registrations={p.registration.name: p.registration for p in pinned}
        | builtin_registrations(),
    )
    expected = [
        check_leases(state, now),
        check_timers(state, now),
        check_capacity(capacity_view(state, configuration, now)),
        check_holds(state, "budget", "budgets", BUDGET_ADVICE),
        check_holds(state, "crash_loop", "crash_loop", CRASH_LOOP_ADVICE),
    ]
    log.close()
    # Once with the stored projections at the head (the fresh scheduler fold is the state),
    # once without them (a fold of its own).
    for _ in range(2):
        report = doctor(str(tmp_path / "rota.db"), clock=clock, settings=service.settings)
        found = [report.check(c.name) for c in expected]
        assert found == expected
        assert report.check("projection_drift").status == "ok"
        assert {c.status for c in expected} >= {"warn"}
        (tmp_path / "rota.db.projections").unlink(missing_ok=True)


# -- the walk and the canonical rows --------------------------------------------------------


def test_first_mismatch_names_a_missing_an_extra_and_a_different_row() -> None:
    left = [("a", b"1"), ("b", b"2"), ("d", b"4")]
    assert first_mismatch(left, left) is None
    assert first_mismatch(left, [("a", b"1"), ("c", b"3")]) == ("b", b"2", None)
    assert first_mismatch([("a", b"1")], [("a", b"1"), ("c", b"3")]) == ("c", None, b"3")
    assert first_mismatch(left, [("a", b"1"), ("b", b"9")]) == ("b", b"2", b"9")
    assert first_mismatch([], []) is None


def test_canonical_rows_are_the_decoded_projections_rows_stored_or_not() -> None:
    """A stored scheduler projection without its `turns` row decodes to turns 0: the rows a
    walk compares are those of the decoded projection, as `first_difference` saw them."""
    projection = SchedulerProjection()
    projection.turns = 0
    rows = sorted(
        (key, value)
        for key in projection.row_keys()
        if key != "turns" and (value := projection.row(key)) is not None
    )
    reading = read_scheduler(0, iter(rows))
    assert reading.decoded
    decoded = SchedulerProjection.from_rows(0, rows)
    assert reading.digest == decoded.digest()
    canonical = list(canonical_rows(SchedulerProjection, reading, iter(rows)))
    assert canonical == sorted((key, decoded.row(key) or b"") for key in decoded.row_keys())
