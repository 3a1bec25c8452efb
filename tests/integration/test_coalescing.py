"""Debounce and unique Work through the real scheduler (docs/flow-control-coalescing.md):
merged and suppressed submits are events naming their Work, nothing is dropped, and a
rebuild from the log holds the same state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.infrastructure.clock import ManualClock
from rota.replay.rebuild import folded

from .test_group_commit import gate_first_commit, queued, submit_in_threads


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


@pytest.fixture
def s(clock: ManualClock) -> Any:
    with rota.open("memory://", clock=clock, owner="coalesce") as scheduler:
        yield scheduler


class Recorder:
    """A binding that records the inputs each run read."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, list[Any]]] = []

    def __call__(self, ctx: rota.LaunchContext) -> None:
        self.runs.append((ctx.work_id, list(ctx.inputs)))


def events(s: rota.Scheduler, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in s.events(limit=10_000) if e.type == kind]


def same_as_rebuilt(s: rota.Scheduler) -> bool:
    fresh, _ = folded(s.service.store)
    return fresh.digest() == s.service.projection.digest()


def test_submits_within_the_window_run_once_reading_every_input(
    s: rota.Scheduler, clock: ManualClock
) -> None:
    job = Recorder()
    s.register("job", job)
    handles = []
    for n in range(5):
        handles.append(
            s.submit(
                f"push{n}", binding="job", input={"n": n}, debounce=rota.Debounce("repo:a", 10)
            )
        )
        clock.advance(2)
    assert {h.work_id for h in handles} == {"push0"}
    s.tick()
    view = s.work("push0")
    assert view is not None and view.state == "ready"
    assert view.waiting is not None and view.waiting.code == "debounced"
    assert s.work("push1") is None
    clock.advance(7.9)  # the last submit was at +8 s: it starts at +18 s
    s.tick()
    assert job.runs == []
    clock.advance(0.1)
    s.run_until_idle(timeout=10)
    assert job.runs == [("push0", [{"n": n} for n in range(5)])]
    merged = events(s, "core.submit.merged")
    assert [(m["work_id"], m["requested"], m["key"]) for m in merged] == [
        ("push0", f"push{n}", "repo:a") for n in range(1, 5)
    ]
    assert all(m["input_key"].startswith("sha256:") for m in merged)
    consumed = s.work("push0").attempts[0].consumed  # type: ignore[union-attr]
    assert [h.input_position for h in handles] == list(consumed)
    assert same_as_rebuilt(s)


def test_max_wait_bounds_the_delay_under_a_steady_stream(
    s: rota.Scheduler, clock: ManualClock
) -> None:
    job = Recorder()
    s.register("job", job)
    debounce = rota.Debounce("feed", 5, max_wait=20)
    started_at = None
    for n in range(40):  # one submit every 2 s: never 5 s of quiet
        s.submit(f"e{n}", binding="job", input=n, debounce=debounce)
        s.run_until_idle(timeout=10)
        if job.runs and started_at is None:
            started_at = n * 2
        clock.advance(2)
    assert started_at == 20  # first + max_wait, not never
    first, second = job.runs[0], job.runs[1]
    assert first == ("e0", list(range(11)))  # the inputs of +0 .. +20 s
    assert second[0] == "e11" and second[1][0] == 11


def test_a_submit_after_the_start_opens_a_new_window(s: rota.Scheduler, clock: ManualClock) -> None:
    job = Recorder()
    s.register("job", job)
    debounce = rota.Debounce("k", 1)
    s.submit("a", binding="job", input=1, debounce=debounce)
    clock.advance(1)
    s.run_until_idle(timeout=10)
    handle = s.submit("b", binding="job", input=2, debounce=debounce)
    assert handle.work_id == "b"
    clock.advance(1)
    s.run_until_idle(timeout=10)
    assert job.runs == [("a", [1]), ("b", [2])]
    assert events(s, "core.submit.merged") == []
    assert [e["work_id"] for e in events(s, "core.submit.key_taken")] == ["a", "b"]


def test_unique_until_terminal_suppresses_while_live_then_allows(
    s: rota.Scheduler, clock: ManualClock
) -> None:
    job = Recorder()
    s.register("job", job)
    unique = rota.Unique("report:daily")
    first = s.submit("r1", binding="job", input="x", unique=unique)
    again = s.submit("r2", binding="job", input="y", unique=unique)
    assert (first.work_id, again.work_id) == ("r1", "r1")
    assert again.input_position is None
    assert s.work("r2") is None
    (suppressed,) = events(s, "core.submit.suppressed")
    assert suppressed["work_id"] == "r1" and suppressed["requested"] == "r2"
    assert suppressed["key"] == "report:daily" and suppressed["until"] == "until_terminal"
    assert suppressed["input_digest"].startswith("sha256:")
    s.run_until_idle(timeout=10)
    later = s.submit("r3", binding="job", input="z", unique=unique)
    assert later.work_id == "r3"
    s.run_until_idle(timeout=10)
    assert job.runs == [("r1", ["x"]), ("r3", ["z"])]
    assert same_as_rebuilt(s)


def test_unique_forever_suppresses_after_completion(s: rota.Scheduler) -> None:
    job = Recorder()
    s.register("job", job)
    forever = rota.Unique("migration:42", until="forever")
    s.submit("m1", binding="job", unique=forever)
    s.run_until_idle(timeout=10)
    assert s.work("m1").state == "completed"  # type: ignore[union-attr]
    handle = s.submit("m2", binding="job", unique=forever)
    assert handle.work_id == "m1" and s.work("m2") is None
    (suppressed,) = events(s, "core.submit.suppressed")
    assert (suppressed["work_id"], suppressed["until"]) == ("m1", "forever")
    assert job.runs == [("m1", [None])]


def test_a_repeated_submit_records_no_second_merge_or_suppression(
    s: rota.Scheduler, clock: ManualClock
) -> None:
    s.register("job", Recorder())
    debounce = rota.Debounce("d", 30)
    s.submit("a", binding="job", input=1, input_key="k1", debounce=debounce)
    for _ in range(2):
        h = s.submit("b", binding="job", input=2, input_key="k2", debounce=debounce)
        assert h.work_id == "a"
    for _ in range(2):  # the opener's own repeat
        s.submit("a", binding="job", input=1, input_key="k1", debounce=debounce)
    unique = rota.Unique("u")
    s.submit("u1", binding="job", input_key="i1", unique=unique)
    for _ in range(2):
        assert s.submit("u2", binding="job", input_key="i2", unique=unique).work_id == "u1"
    assert len(events(s, "core.submit.merged")) == 1
    assert len(events(s, "core.submit.suppressed")) == 1
    assert [p.key for p in s.work("a").pending] == ["k1", "k2"]  # type: ignore[union-attr]
    assert same_as_rebuilt(s)


def test_every_coalescing_submit_names_its_work_and_rebuilds(
    s: rota.Scheduler, clock: ManualClock
) -> None:
    s.register("job", Recorder())
    asked: dict[str, str] = {}
    for n in range(6):
        kind = {"debounce": rota.Debounce(f"d{n % 2}", 5)}
        asked[f"w{n}"] = s.submit(f"w{n}", binding="job", input=n, **kind).work_id  # type: ignore[arg-type]
        clock.advance(1)
    named = {e["requested"]: e["work_id"] for e in events(s, "core.submit.merged")}
    for requested, got in asked.items():
        assert got == requested or named[requested] == got
    assert set(asked.values()) == {"w0", "w1"}
    assert same_as_rebuilt(s)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"debounce": rota.Debounce("k", 0)}, "debounce wait 0"),
        ({"debounce": rota.Debounce("k", 10, max_wait=5)}, "below its wait"),
        ({"debounce": rota.Debounce("bad key!", 1)}, "key 'bad key!'"),
        ({"unique": rota.Unique("k", until="sometimes")}, "unique until 'sometimes'"),  # type: ignore[arg-type]
        ({"debounce": rota.Debounce("k", 1), "unique": rota.Unique("k")}, "not both"),
    ],
)
def test_a_malformed_coalescing_submit_is_refused(
    s: rota.Scheduler, options: dict[str, Any], words: str
) -> None:
    s.register("job", Recorder())
    with pytest.raises(rota.RotaError) as refused:
        s.submit("w", binding="job", **options)
    assert refused.value.code == "invalid_flow"
    assert words in refused.value.message
    assert s.work("w") is None


def test_one_transaction_may_not_name_a_key_twice(s: rota.Scheduler) -> None:
    s.register("job", Recorder())
    debounce = rota.Debounce("k", 1)
    with pytest.raises(rota.RotaError) as refused:
        s.submit_many(
            [
                rota.Submission("a", "job", input=1, debounce=debounce),
                rota.Submission("b", "job", input=2, debounce=debounce),
            ]
        )
    assert refused.value.code == "invalid_flow"
    assert s.works() == []


@pytest.mark.parametrize("kind", ["debounce", "unique"])
def test_queued_submits_on_one_key_make_one_work(s: rota.Scheduler, kind: str) -> None:
    """Submits on one key queued behind a commit are not decided together against the
    state before their batch (which would open two windows): one batch each."""
    s.register("job", Recorder())
    option: dict[str, Any] = (
        {"debounce": rota.Debounce("k", 60)} if kind == "debounce" else {"unique": rota.Unique("k")}
    )
    gate, sizes, _, first_threads = gate_first_commit(
        s, lambda: s.submit("lead", binding="job", input=0)
    )
    calls = {
        f"t{n}": (lambda n=n: s.submit(f"t{n}", binding="job", input=n, **option))
        for n in range(1, 7)
    }
    outcomes, threads = submit_in_threads(calls)
    queued(s._submits, 6)
    gate.set()
    for thread in [*first_threads, *threads]:
        thread.join(timeout=30)
    assert sizes == [1, 1, 1, 1, 1, 1, 1]
    handles = {name: h.work_id for name, h in outcomes.items() if isinstance(h, rota.WorkHandle)}
    assert len(handles) == 6, outcomes
    (holder,) = {w.id for w in s.works()} - {"lead"}
    assert set(handles.values()) == {holder}
    named = "core.submit.merged" if kind == "debounce" else "core.submit.suppressed"
    assert sorted(e["requested"] for e in events(s, named)) == sorted(set(handles) - {holder})
    pending = s.work(holder).pending  # type: ignore[union-attr]
    assert len(pending) == (6 if kind == "debounce" else 1)
    assert same_as_rebuilt(s)


def test_the_window_survives_a_reopen_and_is_seen_by_another_scheduler(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The holder of a key is in the stored projection (its `flow` row) and in the log:
    a reopened scheduler, and a second one on the same file, merge into the open window."""
    store = tmp_path / "rota.db"
    debounce = rota.Debounce("k", 30)
    with rota.open(store, clock=clock, owner="a") as a:
        a.register("job", Recorder())
        a.submit("w1", binding="job", input=1, debounce=debounce)
    with rota.open(store, clock=clock, owner="a") as a, rota.open(store, clock=clock) as b:
        a.register("job", Recorder())
        b.register("job", Recorder())
        assert a.submit("w2", binding="job", input=2, debounce=debounce).work_id == "w1"
        assert b.submit("w3", binding="job", input=3, debounce=debounce).work_id == "w1"
        assert len(a.work("w1").pending) == 3  # type: ignore[union-attr]
        assert {w.id for w in b.works()} == {"w1"}
