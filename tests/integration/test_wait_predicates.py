"""Wait predicates through the embedded API and the real host (seed 001): a callable that
returns waiting registers a key, schema or named predicate; only matching input resumes the
parked attempt, other input queues (visible, judged again by a later wait); the wake's
event id starts the resumed segment; named verdicts are recorded, so replay never asks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres import schema_url, temporary_schema

import rota
from rota.domain.events import WaitJudged
from rota.projections.scheduler import SchedulerProjection
from rota.replay.rebuild import fold


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[rota.Scheduler]:
    with rota.open(tmp_path / "waits.db", owner="w") as s:
        yield s


def settle(s: rota.Scheduler, condition: Callable[[], bool], passes: int = 400) -> None:
    for _ in range(passes):
        s.tick()
        if condition():
            return
        s.host.wake.wait(0.05)  # (the cadence's own wake: set by each launch's result)
        s.host.wake.clear()
    raise AssertionError("the condition never held")


def state(s: rota.Scheduler, work: str = "w") -> str:
    view = s.work(work)
    assert view is not None
    return view.state


def waiter(waits: list[rota.WaitPredicate | None], seen: list[list[Any]]) -> Any:
    """Waits with the next predicate of `waits` on each segment; completes when they run out."""

    def run(ctx: rota.LaunchContext) -> rota.Result:
        seen.append(list(ctx.inputs))
        if waits:
            return rota.Result(outcome="waiting", wait=waits.pop(0))
        return rota.Result(data={"heard": seen[-1]})

    return run


def test_only_the_matching_key_wakes_and_its_event_starts_the_segment(
    scheduler: rota.Scheduler,
) -> None:
    seen: list[list[Any]] = []
    scheduler.register("agent", waiter([rota.KeyWait(key="approval")], seen))
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")

    chatter = scheduler.inject("w", {"say": "hi"}, key="chatter")
    assert (chatter.delivery, chatter.queued) == (
        "queued",
        "the wait is for input key 'approval', not 'chatter'",
    )
    for _ in range(3):
        scheduler.tick()
    view = scheduler.work("w")
    assert view is not None and view.state == "waiting"  # queued input wakes nothing
    assert view.attempts[0].wait is not None
    assert view.attempts[0].wait.describe == "input key 'approval'"
    assert view.attempts[0].wait.predicate == {"kind": "key", "key": "approval"}
    assert [(p.key, p.queued) for p in view.pending] == [("chatter", chatter.queued)]

    approval = scheduler.inject("w", {"ok": True}, key="approval")
    assert (approval.delivery, approval.queued) == ("wake", None)
    # The queued input is kept for the Work's next attempt, never dropped: it runs after.
    settle(scheduler, lambda: state(scheduler) == "completed")
    view = scheduler.work("w")
    assert view is not None
    resumed = view.attempts[0].segments[-1]
    assert (resumed.kind, resumed.wake) == ("resume", approval.position)
    # The resume took the matching input only (an attempt's inputs accumulate).
    assert seen == [["start"], ["start", {"ok": True}], [{"say": "hi"}]]


def test_queued_input_wakes_a_later_wait_it_matches(scheduler: rota.Scheduler) -> None:
    seen: list[list[Any]] = []
    waits: list[rota.WaitPredicate | None] = [rota.KeyWait(key="a"), rota.KeyWait(key="b")]
    scheduler.register("agent", waiter(waits, seen))
    scheduler.submit("w", binding="agent", kind="standing", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")
    b = scheduler.inject("w", "for b", key="b")
    assert b.delivery == "queued"
    a = scheduler.inject("w", "for a", key="a")
    assert a.delivery == "wake"
    # Woken by a, the attempt waits for b, which is already queued: it resumes at once.
    settle(scheduler, lambda: len(seen) == 3)
    assert seen == [["start"], ["start", "for a"], ["start", "for a", "for b"]]
    view = scheduler.work("w")
    assert view is not None
    wakes = [s.wake for s in view.attempts[0].segments]
    assert wakes == [None, a.position, b.position]


def test_a_schema_wait_says_why_input_is_queued(scheduler: rota.Scheduler) -> None:
    schema = {"type": "object", "required": ["decision"]}
    scheduler.register("agent", waiter([rota.SchemaWait(schema=schema)], []))
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")
    no = scheduler.inject("w", {"other": 1}, key="k1")
    assert no.queued == "the wait's schema refuses it: payload has no 'decision'"
    yes = scheduler.inject("w", {"decision": "go"}, key="k2")
    assert yes.delivery == "wake"
    settle(scheduler, lambda: state(scheduler) != "waiting")
    view = scheduler.work("w")
    assert view is not None and view.attempts[0].segments[1].wake == yes.position


def test_a_named_wait_is_judged_once_and_replay_never_asks_again(
    scheduler: rota.Scheduler,
) -> None:
    asked: list[str] = []

    def approved(item: rota.PendingInput) -> bool:
        asked.append(item.key)
        return isinstance(item.payload, dict) and item.payload.get("ok") is True

    scheduler.register_wait_predicate("approved", approved)
    scheduler.register("agent", waiter([rota.NamedWait(name="approved")], []))
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")
    no = scheduler.inject("w", {"ok": False}, key="k1")
    assert (no.delivery, no.queued) == ("queued", "named predicate 'approved' did not match it")
    for _ in range(3):
        scheduler.tick()
    assert asked == ["k1"]  # judged once, recorded, never asked again
    yes = scheduler.inject("w", {"ok": True}, key="k2")
    assert yes.delivery == "wake"
    settle(scheduler, lambda: state(scheduler) != "waiting")
    verdicts = [
        (r.event.key, r.event.matched)
        for r in scheduler.store.read(0, 10_000)
        if isinstance(r.event, WaitJudged)
    ]
    assert verdicts == [("k1", False), ("k2", True)]
    # Replay from the log gives the same Work without calling the predicate.
    asked.clear()
    replayed = SchedulerProjection()
    fold(scheduler.store, [replayed])
    assert replayed.works["w"] == scheduler.service.projection.works["w"]
    assert replayed.digest() == scheduler.service.projection.digest()
    assert asked == []


def test_a_named_wait_that_raises_or_is_unknown_holds_the_work(
    scheduler: rota.Scheduler,
) -> None:
    def broken(item: rota.PendingInput) -> bool:
        raise ValueError("secret payload text")

    scheduler.register("agent", waiter([rota.NamedWait(name="later")], []))
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")
    scheduler.inject("w", "x", key="k1")
    scheduler.tick()  # nothing registered as "later" here (a restart without it): held
    view = scheduler.work("w")
    assert view is not None and view.state == "held"
    (hold,) = view.holds
    assert hold.kind == "wait" and "'later' is not registered" in hold.reason
    scheduler.register_wait_predicate("later", broken)
    scheduler.release("w")
    scheduler.tick()
    view = scheduler.work("w")
    assert view is not None and view.state == "held"
    assert "raised ValueError on input 'k1'" in view.holds[0].reason
    assert "secret" not in view.holds[0].reason  # the exception's type only
    scheduler.register_wait_predicate("later", lambda item: True)
    scheduler.release("w")
    settle(scheduler, lambda: state(scheduler) == "completed")


def test_a_wait_on_a_result_that_is_not_waiting_fails_the_attempt(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.register(
        "agent", lambda ctx: rota.Result(outcome="waiting", wait=rota.KeyWait(key="bad key"))
    )
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "failed" or state(scheduler) == "retry_wait")
    view = scheduler.work("w")
    assert view is not None
    error = view.attempts[0].error
    assert error is not None and error.code == "invalid_result"
    assert "wait key 'bad key'" in error.message


def test_register_wait_predicate_refuses_a_bad_name(scheduler: rota.Scheduler) -> None:
    with pytest.raises(rota.InvalidCommand) as refused:
        scheduler.register_wait_predicate("Bad Name", lambda item: True)
    assert refused.value.code == "invalid_wait"


def test_rota_inject_says_whether_the_input_wakes_or_is_queued(tmp_path: Path) -> None:
    store = tmp_path / "cli.db"
    with rota.open(store, owner="setup") as s:
        s.register("waiter", lambda ctx: None)
        for work, wait in (("k", rota.KeyWait(key="go")), ("n", rota.NamedWait(name="ok"))):
            s.submit(work, binding="waiter", input="start")
            (claimed,) = s.service.lifecycle.start_pass().claimed
            waiting = rota.Result(outcome="waiting", wait=wait)
            s.service.lifecycle.finish(claimed.attempt.execution_id, 1, waiting)

    def inject(work: str, key: str) -> str:
        args = ["inject", work, "--input", "1", "--input-key", key]
        done = subprocess.run(
            [sys.executable, "-P", "-m", "rota", "--store", str(store), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert (
        inject("k", "chat") == "k: input chat queued: the wait is for input key 'go', not 'chat'\n"
    )
    assert inject("k", "go") == "k: input go matches the wait; the parked attempt resumes\n"
    shown = subprocess.run(
        [sys.executable, "-P", "-m", "rota", "--store", str(store), "work", "show", "k"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    assert "    chat queued: the wait is for input key 'go', not 'chat'\n" in shown
    assert "    waits for: input key 'go'\n" in shown
    # A named predicate is judged by the process that registered it: not this one.
    assert inject("n", "a") == (
        "n: input a queued: named predicate 'ok' has not judged it yet (the next start pass does)\n"
    )


def test_waits_and_verdicts_survive_a_restart_on_postgresql() -> None:
    with temporary_schema() as schema:
        url = schema_url(schema)
        with rota.open(url, owner="pg-a") as s:
            s.register("agent", lambda ctx: None)
            s.register_wait_predicate("ok", lambda item: item.payload == "yes")
            s.submit("w", binding="agent", input="start")
            (claimed,) = s.service.lifecycle.start_pass().claimed
            waiting = rota.Result(outcome="waiting", wait=rota.NamedWait(name="ok"))
            s.service.lifecycle.finish(claimed.attempt.execution_id, 1, waiting)
            assert s.inject("w", "no", key="k1").delivery == "queued"
            before = s.service.projection.works["w"]
        # A restart without the predicate: the recorded verdict stands, nothing is re-asked.
        with rota.open(url, owner="pg-b") as s:
            s.register("agent", lambda ctx: None)
            assert s.service.projection.works["w"] == before
            view = s.work("w")
            assert view is not None and view.attempts[0].wait is not None
            assert view.pending[0].queued == "named predicate 'ok' did not match it"
            replayed = SchedulerProjection()
            fold(s.store, [replayed])
            assert replayed.works["w"] == before
            # New input it cannot judge here holds the Work, with the reason.
            s.inject("w", "yes", key="k2")
            s.tick()
            view = s.work("w")
            assert view is not None and view.holds[0].kind == "wait"


def test_an_inject_into_a_parked_attempt_with_a_request_id_repeats_from_the_log(
    scheduler: rota.Scheduler,
) -> None:
    seen: list[list[Any]] = []
    scheduler.register("agent", waiter([rota.KeyWait(key="approval")], seen))
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")

    first = scheduler.inject("w", {"ok": False}, request_id="ticket-1")
    head = scheduler.store.head()
    again = scheduler.inject("w", {"ok": False}, request_id="ticket-1")
    assert first.request is not None and again.request is not None
    assert (first.request.repeated, again.request.repeated) == (False, True)
    assert again.request.position == first.request.position == first.position
    assert again.delivery == "queued"  # (the wait is for 'approval', not 'ticket-1')
    assert scheduler.store.head() == head  # nothing appended by the repeat
    with pytest.raises(rota.RotaError) as caught:
        scheduler.inject("w", {"ok": True}, request_id="ticket-1")  # another payload
    assert caught.value.code == "request_id_reused"
    assert scheduler.store.head() == head


def test_explain_names_what_a_parked_attempt_waits_for(scheduler: rota.Scheduler) -> None:
    from rota.replay.explain import explain

    seen: list[list[Any]] = []
    scheduler.register("agent", waiter([rota.KeyWait(key="approval")], seen))
    scheduler.submit("w", binding="agent", input="start")
    settle(scheduler, lambda: state(scheduler) == "waiting")
    (waiting,) = [s for s in explain(scheduler.store, "w").statements if s.kind == "waiting"]
    assert waiting.text == "parked: attempt 1 waits for input key 'approval'"
