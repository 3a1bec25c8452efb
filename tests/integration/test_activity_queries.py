"""The read side of the web view's new pages (`scheduler.queries.activity`, `.series`): the
log newest first a page at a time, the Works by last activity (each once), id search, a
Work's schedule fires, the Works failed for good, and series over time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from postgres import DatabaseClock, require_postgres, temporary_schema

import rota
from rota.application.queries import activity as activity_module
from rota.domain.policy import RetryPolicy
from rota.infrastructure.clock import ManualClock

START = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


def _fail(ctx: rota.LaunchContext) -> None:
    raise rota.Fail("boom", "it broke")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def world(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[rota.Scheduler, ManualClock]]:
    """Each backend: the queries read the log backwards through `read(after, limit)`, and
    a stored projection's Works on SQLite and PostgreSQL. PostgreSQL records the
    database's time: the test sets it (`DatabaseClock`)."""
    with contextlib.ExitStack() as stack:
        if request.param == "postgres":
            require_postgres()
            schema = stack.enter_context(temporary_schema())
            database = DatabaseClock(schema, START)
            s = rota.open(database.url)
            s.service.store._clock.refresh = 0  # type: ignore[attr-defined]
            clock: ManualClock = database  # type: ignore[assignment]
        else:
            clock = ManualClock(START)
            target = "memory://" if request.param == "memory" else str(tmp_path / "rota.db")
            s = rota.open(target, clock=clock)
        s.register("ok", lambda ctx: "ok", inline=True)
        s.register("bad", _fail, inline=True, retry=RetryPolicy(max_attempts=1))
        try:
            yield s, clock
        finally:
            s.close()


def _pages(read: object, **kwargs: object) -> list[list[int]]:
    pages, before = [], None
    for _ in range(100):
        page = read(before=before, **kwargs)  # type: ignore[operator]
        pages.append([e.position for e in page.events])
        before = page.before
        if before is None:
            return pages
    raise AssertionError("no last page")


def test_events_newest_first_in_pages_that_neither_repeat_nor_skip(world) -> None:  # type: ignore[no-untyped-def]
    s, clock = world
    for n in range(12):
        s.submit(f"w{n:02d}", binding="ok")
        clock.advance(1)
    s.run_until_idle(timeout=10)
    head = s.store.head().position
    pages = _pages(s.queries.activity.events_page, limit=7)
    flat = [p for page in pages for p in page]
    assert flat == list(range(head, 0, -1))
    assert all(len(page) == 7 for page in pages[:-1])
    first = s.queries.activity.events_page(limit=3)
    assert first.head == head and [e.position for e in first.events] == [head, head - 1, head - 2]


def test_events_filter_by_stream_and_type_prefix(world) -> None:  # type: ignore[no-untyped-def]
    s, _ = world
    s.submit("a", binding="ok")
    s.submit("b", binding="bad")
    s.run_until_idle(timeout=10)
    every = s.events()
    activity = s.queries.activity
    only_a = [e.position for e in activity.events_page(stream="work/a", limit=100).events]
    assert only_a == [e.position for e in reversed(every) if e.stream == "work/a"]
    works = activity.events_page(stream="work/", limit=100).events
    assert {e.stream for e in works} == {"work/a", "work/b"}
    executions = activity.events_page(type="core.execution.", limit=100).events
    assert executions and all(e.type.startswith("core.execution.") for e in executions)
    (failed,) = activity.events_page(type="core.execution.failed", limit=100).events
    assert failed.stream == "work/b"


def test_a_filtered_page_reads_at_most_scan_events_and_hands_back_its_cursor(
    world, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    s, _ = world
    s.submit("rare", binding="ok")
    for n in range(20):
        s.submit(f"common{n}", binding="ok")
    monkeypatch.setattr(activity_module, "SCAN", 5)
    monkeypatch.setattr(activity_module, "WINDOW", 3)
    first = s.queries.activity.events_page(stream="work/rare", limit=10)
    assert first.events == () and first.before is not None  # stopped early, not at the end
    pages = _pages(s.queries.activity.events_page, stream="work/rare", limit=10)
    found = [p for page in pages for p in page]
    assert found == [e.position for e in reversed(s.events()) if e.stream == "work/rare"]


def test_recent_works_are_by_last_activity_each_once_across_pages(world) -> None:  # type: ignore[no-untyped-def]
    s, clock = world
    for name in ("alpha", "beta", "gamma", "delta", "epsilon"):
        s.submit(name, binding="ok")
        clock.advance(1)
    s.submit("beta", binding="ok", input={"again": 1})  # beta is the newest activity now
    activity = s.queries.activity
    seen, before = [], None
    while True:
        page = activity.recent_works(before=before, limit=2)
        seen += [w.id for w in page.works]
        before = page.before
        if before is None:
            break
    assert seen == ["beta", "epsilon", "delta", "gamma", "alpha"]
    (row,) = activity.rows(["beta"])
    assert row.submitted_at == "2026-11-03T09:00:01.000000Z"
    assert row.last_event == "core.input.accepted" and row.last_activity == (
        "2026-11-03T09:00:05.000000Z"
    )
    assert [w.id for w in activity.recent_works(search="lta").works] == ["delta"]
    assert [w.id for w in activity.recent_works(state="ready", limit=50).works] == seen


def test_search_ids_in_id_order_with_a_cursor(world) -> None:  # type: ignore[no-untyped-def]
    s, _ = world
    for name in ("job-3", "job-1", "other", "job-2", "a-job"):
        s.submit(name, binding="ok")
    ids, cursor = s.queries.activity.search_ids("job", limit=2)
    assert ids == ["a-job", "job-1"] and cursor == "job-1"
    ids, cursor = s.queries.activity.search_ids("job", after=cursor, limit=2)
    assert ids == ["job-2", "job-3"] and cursor is None


def test_failed_lists_work_failed_for_good_with_its_error(world) -> None:  # type: ignore[no-untyped-def]
    s, _ = world
    s.submit("fine", binding="ok")
    s.submit("broken", binding="bad")
    s.run_until_idle(timeout=10)
    rows, count = s.queries.activity.failed()
    assert count == 1
    (row,) = rows
    assert (row.work, row.code, row.message, row.blocked) == (
        "broken",
        "boom",
        "it broke",
        "exhausted",
    )
    assert (row.failures, row.budget) == (1, 1)


def test_fires_name_the_schedule_nominal_time_and_the_attempt_that_took_it(world) -> None:  # type: ignore[no-untyped-def]
    s, clock = world
    s.schedule("tick", binding="ok", every="5m")
    s.schedules.trigger_now("tick", key="k1", actor="me")
    (work_id,) = [w.id for w in s.works()]
    # a caller's own input naming a schedule is no fire
    s.submit("plain", binding="ok", input={"schedule": "tick", "nominal": "x"})
    s.run_until_idle(timeout=10)
    assert s.queries.activity.fires("plain") == []
    (fire,) = s.queries.activity.fires(work_id)
    assert fire.schedule == "tick" and fire.key == "schedule/tick/manual/k1" and fire.manual
    assert fire.nominal.startswith("2026-11-03T09:00:00")
    assert fire.attempt == 1
    clock.advance(300)
    s.tick()  # the nominal time 09:05 fires
    s.run_until_idle(timeout=10)
    _, timed = s.queries.activity.fires(work_id)
    assert timed.nominal.startswith("2026-11-03T09:05:00") and not timed.manual
    assert timed.key.startswith("schedule/tick/2026-11-03T09:05:00") and timed.attempt == 2
    assert s.queries.activity.fires("no-such") == []


def test_series_buckets_outcomes_and_latency_by_binding(world) -> None:  # type: ignore[no-untyped-def]
    s, clock = world
    slow_started: list[int] = []

    def slow(ctx: rota.LaunchContext) -> str:
        slow_started.append(1)
        clock.advance(30)
        return "done"

    s.register("slow", slow, inline=True)
    s.submit("s1", binding="slow")
    s.run_until_idle(timeout=10)  # completed at 09:00:30, 30 s after its start
    clock.advance(3600 - 30)
    s.submit("b1", binding="bad")
    s.submit("o1", binding="ok")
    s.run_until_idle(timeout=10)  # at 10:00:00
    clock.advance(60)
    series = s.queries.series.over_time(clock.now(), hours=2, buckets=4)
    # four buckets of 30 min from 08:01: 09:00:30 is in the second, 10:00:00 in the last
    assert series.buckets[0].start == "2026-11-03T08:01:00.000000Z"
    assert [b.completed for b in series.buckets] == [0, 1, 0, 1]
    assert [b.failed for b in series.buckets] == [0, 0, 0, 1]
    assert series.buckets[1].latency == {"slow": 30.0}
    assert set(series.buckets[3].latency) == {"bad", "ok"}
    assert series.bindings == ("bad", "ok", "slow")
    assert series.bucket_seconds == 1800 and not series.truncated
    # a window after all of it is empty; an earlier end ignores what came later
    later = s.queries.series.over_time(clock.now() + (clock.now() - START) * 3, hours=1)
    assert sum(b.completed + b.failed for b in later.buckets) == 0
    with pytest.raises(ValueError):
        s.queries.series.over_time(clock.now(), hours=0)
