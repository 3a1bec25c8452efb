"""Listing Works pages through the projection store: filters, a keyset cursor that stays
stable while Works are added, the bounds of a page, and a listing that leaves only the
active Works in memory, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres import require_postgres, schema_url, temporary_schema

import rota
from rota.infrastructure.stored_works import StoredWorks
from rota.projections.work_pages import MAX_LIMIT, WorkFilter, page_in_memory

CONFIG = {"settings": {"concurrency": 2}}
DONE = [f"done-{n:02d}" for n in range(12)]
READY = [f"ready-{n}" for n in range(4)]


def _echo(ctx: rota.LaunchContext) -> dict[str, Any]:
    return {"attempt": ctx.attempt}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "rota.db")
        return
    require_postgres()
    with temporary_schema() as schema:
        yield schema_url(schema)


def populate(target: str) -> None:
    """Twelve completed Works in two scopes (quiet) and four ready ones on a binding nothing
    defines (active: they wait); the keeper saves and closes."""
    with rota.open(target, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        for n, work_id in enumerate(DONE):
            scope = "root/team" if n % 3 else "root/other"
            scheduler.submit(work_id, binding="echo", scope=scope, input={"n": n})
        scheduler.run_until_idle(timeout=30)
        scheduler.service.lifecycle.record_served(["later"])  # a daemon elsewhere serves it
        for work_id in READY:
            scheduler.submit(work_id, binding="later", scope="root/team/sub", input={})


def listed(scheduler: rota.Scheduler, limit: int, **filters: Any) -> list[str]:
    """Every page's Work ids, one after another."""
    return [work for page in every_page(scheduler, limit, **filters) for work in page]


def every_page(scheduler: rota.Scheduler, limit: int, **filters: Any) -> list[list[str]]:
    pages, after = [], ""
    while after is not None:
        page, after = scheduler.works_page(after=after, limit=limit, **filters)
        pages.append([w.id for w in page])
    return pages


def stored(scheduler: rota.Scheduler) -> StoredWorks:
    works = scheduler.service.projection.works
    assert isinstance(works, StoredWorks), "a reopened store should leave quiet Works on disk"
    return works


def held(scheduler: rota.Scheduler) -> set[str]:
    return {w.work_id for w in stored(scheduler).in_memory()}


def test_pages_in_id_order_with_filters_holding_only_active_works(target: str) -> None:
    populate(target)
    with rota.open(target, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        assert held(scheduler) == set(READY)
        every = sorted(DONE + READY)
        pages = every_page(scheduler, 5)
        assert [len(p) for p in pages] == [5, 5, 5, 1]
        assert [w for page in pages for w in page] == every
        assert every_page(scheduler, 16) == [every]  # limit + 1: no empty last page
        assert listed(scheduler, 4, state="ready") == READY
        assert listed(scheduler, 3, state="completed") == DONE
        team = [w for n, w in enumerate(DONE) if n % 3] + READY
        assert listed(scheduler, 2, scope="root/team") == sorted(team)
        assert listed(scheduler, 2, scope="root/team/sub") == READY
        assert every_page(scheduler, 2, scope="root/tea") == [[]]  # a scope, not a prefix
        assert listed(scheduler, 7, binding="echo") == DONE
        both = every_page(scheduler, 3, binding="echo", scope="root/other", state="completed")
        assert [w for page in both for w in page] == DONE[::3]
        assert [w.id for w in scheduler.works()] == every
        # Paging read the quiet Works' rows, and kept none of them.
        assert held(scheduler) == set(READY)
        first = scheduler.works_page(limit=1)[0][0]
        assert first.id == "done-00" and first.state == "completed"
        assert first.scope == "root/other" and first.attempts == 1


def test_a_listing_by_a_state_no_quiet_work_is_in_reads_no_stored_row(target: str) -> None:
    populate(target)
    with rota.open(target, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        works = stored(scheduler)
        # Every listing below by a state of HELD_STATES is answered from the held Works:
        # reading a stored row now fails the test.
        page_rows = works._page_rows

        def refuse(after: str, count: int) -> Any:
            raise AssertionError(f"a stored Work row was read (after {after!r})")

        works._page_rows = refuse
        assert listed(scheduler, 3, state="ready") == READY
        assert listed(scheduler, 3, state="ready", scope="root/team/sub") == READY
        assert listed(scheduler, 3, state="running") == []
        assert listed(scheduler, 3, state="retry_wait") == []
        with pytest.raises(AssertionError, match="stored Work row"):
            listed(scheduler, 3, state="completed")  # quiet Works: the store is paged
        works._page_rows = page_rows
        assert listed(scheduler, 3, state="completed") == DONE


def test_a_filtered_listing_decodes_only_the_rows_it_may_show(target: str) -> None:
    populate(target)
    with rota.open(target, config=CONFIG) as scheduler:
        scheduler.register("echo", _echo)
        works = stored(scheduler)
        decoded: list[str] = []
        decode = works._stored

        def counting(work_id: str, value: bytes) -> Any:
            decoded.append(work_id)
            return decode(work_id, value)

        works._stored = counting  # type: ignore[method-assign]
        assert listed(scheduler, 5, binding="later") == READY
        assert decoded == []  # the READY ones are held; every stored row is another binding's
        assert listed(scheduler, 5, scope="root/other") == DONE[::3]
        assert set(decoded) == set(DONE[::3])  # (a page's look-ahead row is read again)
        decoded.clear()
        assert listed(scheduler, 5, state="idle") == []
        assert listed(scheduler, 5, state="cancelled") == []
        assert decoded == []  # every stored Work is completed
        assert listed(scheduler, 5, state="completed") == DONE
        assert set(decoded) == set(DONE)


def test_the_cursor_is_stable_while_works_are_added(target: str) -> None:
    populate(target)
    with rota.open(target, config=CONFIG) as scheduler:
        page, after = scheduler.works_page(limit=6)
        assert [w.id for w in page] == sorted(DONE + READY)[:6] and after == "done-05"
        # Added meanwhile: one before the cursor (not seen by this listing), some after.
        for work_id in ("aaa", "done-05x", "zzz"):
            scheduler.submit(work_id, binding="later", input={})
        rest: list[str] = []
        while after is not None:
            page, after = scheduler.works_page(after=after, limit=6)
            rest += [w.id for w in page]
        assert rest == sorted([*DONE[6:], "done-05x", *READY, "zzz"])
        assert "aaa" in [w.id for w in scheduler.works()]


def test_the_bounds_of_a_page(target: str) -> None:
    populate(target)
    with rota.open(target, config=CONFIG) as scheduler:
        assert len(scheduler.works_page()[0]) == 16  # the default page
        with pytest.raises(ValueError):
            scheduler.works_page(limit=0)
        with pytest.raises(ValueError):
            scheduler.works_page(state="sleeping")
        page, after = scheduler.works_page(limit=10 * MAX_LIMIT)  # cut to the hard cap
        assert len(page) == len(DONE + READY) and after is None
        assert scheduler.works_page(after="zzzz") == ([], None)


def test_a_projection_held_in_memory_pages_alike() -> None:
    from rota.application.timestamps import parse_timestamp
    from rota.domain.state import WorkState

    at = parse_timestamp("2026-07-01T00:00:00Z")
    works = {
        f"w{n}": WorkState(
            work_id=f"w{n}",
            scope="root/a" if n % 2 else "root/b",
            binding="x",
            kind="run-once",
            trigger="all",
            safety="undeclared",
            version=1,
            submitted_at=at,
        )
        for n in range(7)
    }
    page, after = page_in_memory(works, "", 3, WorkFilter())
    assert [w.work_id for w in page] == ["w0", "w1", "w2"] and after == "w2"
    page, after = page_in_memory(works, "w2", 3, WorkFilter(scope="root/a"))
    assert [w.work_id for w in page] == ["w3", "w5"] and after is None


def _cli(*args: str, cwd: Path) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_rota_work_list_pages_and_filters(tmp_path: Path) -> None:
    import json

    store = str(tmp_path / "rota.db")
    populate(store)
    base = ("--store", store, "work", "list")
    one = json.loads(_cli(*base, "--json", "--limit", "3", cwd=tmp_path))
    assert [w["id"] for w in one["works"]] == DONE[:3] and one["next"] == DONE[2]
    two = json.loads(_cli(*base, "--json", "--limit", "3", "--after", one["next"], cwd=tmp_path))
    assert [w["id"] for w in two["works"]] == DONE[3:6]
    every = json.loads(_cli(*base, "--json", "--state", "ready", cwd=tmp_path))
    assert [w["id"] for w in every] == READY
    table = _cli(*base, "--scope", "root/other", "--limit", "2", cwd=tmp_path).splitlines()
    assert table[0].split()[:2] == ["WORK", "STATE"]
    assert [line.split()[0] for line in table[1:3]] == ["done-00", "done-03"]
    assert table[3] == "2 Work: 2 completed" and table[4] == "more: --after done-03"
    whole = _cli(*base, "--binding", "echo", cwd=tmp_path).splitlines()
    assert whole[-1] == "12 Work: 12 completed" and len(whole) == 14
