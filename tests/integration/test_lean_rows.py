"""The stored Work is lean (issue 18 item 1): a pinned binding is stored once per distinct
content, as a `binding/<digest>` row the Work rows name, and an attempt's trigger input is
not stored beside the consumed input it is; every decoder of Work rows reads them back."""

from __future__ import annotations

from pathlib import Path

import apsw
import msgspec
import pytest

from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.stored_works import StoredWorks
from rota.projections import SchedulerProjection
from rota.projections.work_pages import WorkFilter
from rota.projections.work_rows import BINDING_ROW, WorkCodec, canonical_encoder
from rota.replay.rebuild import fold, rebuild, verify

from .test_rebuild_spill import DONE, busy_log


def stored_rows(path: Path) -> dict[str, bytes]:
    with SQLiteProjectionStore(path) as store:
        _, rows = store.rows(SchedulerProjection.name)
    return {key: bytes(value) for key, value in rows}


def test_works_on_one_binding_store_it_once_and_decode_back(tmp_path: Path) -> None:
    service = busy_log(tmp_path / "rota.db")
    live = service.projection
    works = [work for work in live.works.values() if work.attempts]
    assert len(works) > DONE
    with SQLiteProjectionStore(tmp_path / "p.db") as store:
        store.save(live, service.store, digest=True)
    rows = stored_rows(tmp_path / "p.db")
    bindings = [key for key in rows if key.startswith(BINDING_ROW)]
    assert len(bindings) == 1, "one binding, pinned by every attempt, stored once"
    pinned = canonical_encoder.encode(works[0].attempts[0].pinned)
    assert rows[bindings[0]] == pinned
    for work in works:
        row = rows["work/" + work.work_id]
        assert pinned not in row
        lean = msgspec.json.decode(row)
        for attempt, stored in zip(work.attempts, lean["attempts"], strict=True):
            assert stored["pinned"] == bindings[0][len(BINDING_ROW) :]
            assert attempt.trigger is not None and stored["trigger"] == attempt.trigger.position
        # Smaller than the whole Work's encoding by at least the pinned binding per attempt.
        full = canonical_encoder.encode(work)
        assert len(full) - len(row) >= len(work.attempts) * (len(pinned) - 40)
    decoded = SchedulerProjection.from_rows(live.position, rows.items())
    assert decoded.digest() == live.digest()
    assert {w: decoded.works[w] for w in decoded.works} == {w: live.works[w] for w in live.works}


def test_a_save_after_a_new_binding_writes_its_row(tmp_path: Path) -> None:
    service = busy_log(tmp_path / "rota.db")
    live = service.projection
    first = SchedulerProjection()
    fold(service.store, [first], upto=3)  # a submit, no attempt yet: no binding
    with SQLiteProjectionStore(tmp_path / "p.db") as store:
        store.save(first, service.store)
        assert not any(k.startswith(BINDING_ROW) for k in stored_rows(tmp_path / "p.db"))
        fold(service.store, [first])  # every attempt, saved incrementally (dirty rows)
        store.save(first, service.store)
        assert not first.codec.unsaved
        loaded = store.load_scheduler(service.store)
        assert loaded is not None and loaded.digest() == live.digest()
        lazy = store.load_scheduler(service.store, lazy=True)
        assert lazy is not None and lazy.digest() == live.digest()
        works = lazy.works
        assert isinstance(works, StoredWorks)
        page, _ = works.page("", 1000, WorkFilter())
        assert [w.work_id for w in page] == sorted(live.works)


def test_rebuild_stores_lean_rows_and_verify_names_a_damaged_binding(tmp_path: Path) -> None:
    service = busy_log(tmp_path / "rota.db")
    with SQLiteProjectionStore(tmp_path / "p.db") as store:
        report = rebuild(service.store, store)
        assert report.digests["scheduler"] == service.projection.digest()
        assert verify(service.store, store).ok
    rows = stored_rows(tmp_path / "p.db")
    (binding,) = (key for key in rows if key.startswith(BINDING_ROW))
    with apsw.Connection(str(tmp_path / "p.db")) as conn:
        conn.execute(
            "UPDATE rows_scheduler SET value = ? WHERE key = ?",
            (rows[binding].replace(b'"b"', b'"c"', 1), binding),
        )
    with SQLiteProjectionStore(tmp_path / "p.db") as store:
        found = verify(service.store, store)
    assert not found.ok
    drift = found.drift
    assert drift is not None and drift.first_key == binding


def test_a_row_naming_an_unknown_binding_does_not_decode() -> None:
    codec = WorkCodec()
    with pytest.raises(ValueError, match="does not hold the binding"):
        codec.learn(BINDING_ROW + "0" * 32, b"{}")


def test_a_sqlite_rebuild_copies_the_spilled_rows_inside_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = busy_log(tmp_path / "rota.db")
    from rota.infrastructure.sqlite import projection_swap as projection_store

    through_python: list[str] = []
    original = projection_store.write_rows

    def counted(conn: object, projection: object, keys: object) -> int:
        through_python.append(type(projection).__name__)
        return original(conn, projection, keys)  # type: ignore[arg-type]

    monkeypatch.setattr(projection_store, "write_rows", counted)
    with SQLiteProjectionStore(tmp_path / "p.db") as store:
        report = rebuild(service.store, store)
        assert "SpilledRows" not in through_python
        assert report.rows["scheduler"] == len(stored_rows(tmp_path / "p.db"))
        assert verify(service.store, store).ok
