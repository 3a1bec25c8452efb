"""A WorkTally counts every Work once and then follows the fold: after every event of the
golden histories (recovery segments, holds, retries, controls, outcomes) it equals a fresh
count of every Work, whether the events come one at a time (`apply`) or in pages
(`fold_page`); and a first count taken a page at a time while Works change equals a fresh
count, on a store that holds only its active Works in memory."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.application import tallies
from rota.application.timestamps import parse_timestamp
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.stored_works import StoredWorks
from rota.projections.scheduler import SchedulerProjection
from rota.projections.work_tally import WorkTally
from rota.replay.export import open_export, read_header, read_records

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def counts(tally: WorkTally) -> tuple[Any, ...]:
    return (
        Counter(tally.states),
        Counter(tally.holds),
        set(tally.held),
        Counter(tally.attempts),
        Counter(tally.recoveries),
        tally.works,
    )


def fresh(works: Any) -> tuple[Any, ...]:
    tally = WorkTally()
    tally.count(works)
    tally.counted_upto = None
    return counts(tally)


def rows(name: str) -> list[Any]:
    with open_export(HISTORIES / name) as src:
        header = read_header(src)
        return [
            (
                row.position,
                row.stream,
                row.version,
                parse_timestamp(row.recorded_at),
                DEFAULT_CODEC.decode(row.type, row.type_version, row.data, row.position),
            )
            for row in read_records(src, header)
        ]


NAMES = sorted(p.name for p in HISTORIES.glob("*.jsonl") if p.name != "divergent.jsonl")


@pytest.mark.parametrize("name", NAMES)
def test_a_tally_follows_every_event_one_at_a_time(name: str) -> None:
    projection, tally = SchedulerProjection(), WorkTally()
    tally.counted_upto = None
    projection.watch = tally.changed
    followed = 0
    for position, stream, version, at, event in rows(name):
        projection.apply(position, stream, version, at, event)
        assert counts(tally) == fresh(projection.works.values()), (name, position)
        followed += 1
    assert followed > 10 and tally.works == len(projection.works)


class Row:
    def __init__(self, position: int, stream: str, version: int, event: Any) -> None:
        self.position, self.stream, self.version, self.event = position, stream, version, event


@pytest.mark.parametrize("name", NAMES)
def test_a_tally_follows_a_fold_in_pages(name: str) -> None:
    projection, tally = SchedulerProjection(), WorkTally()
    tally.counted_upto = None
    projection.watch = tally.changed
    found = rows(name)
    for start in range(0, len(found), 7):
        page = found[start : start + 7]
        projection.fold_page(
            [Row(p, s, v, e) for p, s, v, _, e in page], [at for _, _, _, at, _ in page], 10**9
        )
        assert counts(tally) == fresh(projection.works.values()), (name, start)


def test_the_histories_hold_what_a_tally_counts() -> None:
    # A negative control for the two tests above: histories without a hold, a recovery or
    # a failure would let a tally that mishandles them pass.
    held_kinds: set[str] = set()
    recoveries: Counter[str] = Counter()
    outcomes: set[str | None] = set()
    for name in NAMES:
        projection, tally = SchedulerProjection(), WorkTally()
        tally.counted_upto = None
        projection.watch = tally.changed
        for position, stream, version, at, event in rows(name):
            projection.apply(position, stream, version, at, event)
            held_kinds.update(tally.holds)
        recoveries.update(tally.recoveries)
        outcomes.update(outcome for _, outcome in tally.attempts)
    assert recoveries["recovered"] and recoveries["relaunched"]
    assert held_kinds
    assert outcomes >= {"completed", "failed"}


def _echo(ctx: rota.LaunchContext) -> dict[str, Any]:
    if any(isinstance(i, dict) and i.get("fail") for i in ctx.inputs):
        raise RuntimeError("asked to fail")
    return {"ok": True}


def test_a_first_count_in_pages_while_works_change(
    memory_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = memory_url
    config = {"settings": {"concurrency": 4}}
    with rota.open(target, config=config) as scheduler:
        scheduler.register("echo", _echo)
        for n in range(30):
            scheduler.submit(f"w-{n:02d}", binding="echo", input={"fail": n % 5 == 0})
        scheduler.run_until_idle(timeout=30)
        scheduler.service.lifecycle.record_served(["later"])  # a daemon elsewhere serves it
        for n in range(30, 34):
            scheduler.submit(f"w-{n:02d}", binding="later", input={})
    monkeypatch.setattr(tallies, "PAGE", 4)
    with rota.open(target, config=config) as scheduler:
        scheduler.register("echo", _echo)
        service = scheduler.service
        works = service.projection.works
        assert isinstance(works, StoredWorks)
        assert len(list(works.in_memory())) < 30  # quiet Works stay on disk
        tally = service.tallies._current()
        service.tallies._count_a_page(tally)
        service.tallies._count_a_page(tally)
        assert tally.counted_upto == "w-07"
        # Changes on both sides of the cursor while the count is half done.
        scheduler.submit("w-00b", binding="echo", input={})  # new, before the cursor
        scheduler.submit("w-20b", binding="echo", input={})  # new, after it
        scheduler.submit("w-00c", binding="later", input={})
        scheduler.cancel("w-00c")  # counted, then changed
        scheduler.cancel("w-31")  # not counted yet, changed
        scheduler.run_until_idle(timeout=30)
        ready = service.tallies.ready()
        assert ready is tally and tally.complete
        with service.lock:
            service.catch_up()
            assert counts(tally) == fresh(service.projection.works.values())
            assert tally.works == 37
            assert ("cancelled", "root") in tally.states
        # Kept current from then on, without a recount.
        scheduler.submit("z-last", binding="echo", input={"fail": True})
        scheduler.run_until_idle(timeout=30)
        assert service.tallies.ready() is tally
        with service.lock:
            service.catch_up()
            assert counts(tally) == fresh(service.projection.works.values())
