"""Group-committed submits (issue 18 item 2): concurrent `submit()` calls share one store
transaction, each caller gets its own handle or its own error, and a retried submit is
still a no-op."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.application.errors import StoreUnavailable
from rota.application.group_commit import SubmitGroup
from rota.application.ports import AppendResult, NewEvent
from rota.domain.submission import SubmitWork, WorkInput


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[rota.Scheduler]:
    with rota.open(tmp_path / "group.db", owner="host-a") as s:
        s.register("job", lambda ctx: ctx.trigger)
        s.register("other", lambda ctx: None)
        yield s


Outcome = rota.WorkHandle | BaseException


def gate_first_commit(
    scheduler: rota.Scheduler, lead: Callable[[], rota.WorkHandle]
) -> tuple[threading.Event, list[int], dict[str, Outcome], list[threading.Thread]]:
    """Start `lead` on a thread and return once its commit (the group's first) has begun
    and waits for `gate`; `sizes` records each commit's number of requests."""
    group = scheduler._submits
    real = group._commit
    gate, entered = threading.Event(), threading.Event()
    sizes: list[int] = []

    def gated(requests: Sequence[SubmitWork]) -> list[Any]:
        sizes.append(len(requests))
        if len(sizes) == 1:
            entered.set()
            assert gate.wait(30)
        return real(requests)

    group._commit = gated
    outcomes, threads = submit_in_threads({"lead": lead})
    assert entered.wait(30)
    return gate, sizes, outcomes, threads


def submit_in_threads(
    calls: dict[str, Callable[[], rota.WorkHandle]],
) -> tuple[dict[str, Outcome], list[threading.Thread]]:
    outcomes: dict[str, Outcome] = {}

    def call(name: str, fn: Callable[[], rota.WorkHandle]) -> None:
        try:
            outcomes[name] = fn()
        except BaseException as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=call, args=item) for item in calls.items()]
    for thread in threads:
        thread.start()
    return outcomes, threads


def queued(group: SubmitGroup, count: int) -> None:
    """Wait (on the group's condition, notified at every enqueue) until `count` wait."""
    with group._cond:
        assert group._cond.wait_for(lambda: len(group._queue) >= count, timeout=30)


def test_submits_queued_behind_a_commit_share_the_next_transaction(
    scheduler: rota.Scheduler,
) -> None:
    head = scheduler.store.head().position
    gate, sizes, first, first_threads = gate_first_commit(
        scheduler, lambda: scheduler.submit("lead", binding="job", input={"n": 0})
    )
    calls = {
        f"w{n}": (lambda n=n: scheduler.submit(f"w{n}", binding="job", input={"n": n}))
        for n in range(1, 8)
    }
    outcomes, threads = submit_in_threads(calls)
    queued(scheduler._submits, 7)
    gate.set()
    for thread in [*first_threads, *threads]:
        thread.join(timeout=30)
    assert sizes == [1, 7]  # seven callers, one transaction
    outcomes.update(first)
    assert all(isinstance(h, rota.WorkHandle) for h in outcomes.values()), outcomes
    for name, handle in outcomes.items():
        assert isinstance(handle, rota.WorkHandle) and handle.work_id == name
        assert handle.view().state == "ready"
    # One event a Work (submitted, carrying its input), written in two appends.
    assert scheduler.store.head().position == head + 8
    positions = [h.input_position for h in outcomes.values() if isinstance(h, rota.WorkHandle)]
    assert len(set(positions)) == 8


def test_one_bad_submit_does_not_fail_the_others_in_its_batch(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.submit("taken", binding="job")  # defined on "job"; "other" conflicts
    gate, sizes, _, first_threads = gate_first_commit(
        scheduler, lambda: scheduler.submit("lead", binding="job")
    )
    calls: dict[str, Callable[[], rota.WorkHandle]] = {
        "good-1": lambda: scheduler.submit("good-1", binding="job", input={"n": 1}),
        "conflict": lambda: scheduler.submit("taken", binding="other"),
        "bad-id": lambda: scheduler.submit("no spaces allowed!", binding="job"),
        "good-2": lambda: scheduler.submit("good-2", binding="job", input={"n": 2}),
    }
    outcomes, threads = submit_in_threads(calls)
    queued(scheduler._submits, 4)
    gate.set()
    for thread in [*first_threads, *threads]:
        thread.join(timeout=30)
    assert sizes == [1, 4]
    assert isinstance(outcomes["good-1"], rota.WorkHandle)
    assert isinstance(outcomes["good-2"], rota.WorkHandle)
    conflict, bad_id = outcomes["conflict"], outcomes["bad-id"]
    assert isinstance(conflict, rota.RotaError) and conflict.code == "work_conflict"
    assert isinstance(bad_id, rota.RotaError) and bad_id.code == "invalid_work_id"
    scheduler.run_until_idle(timeout=30)
    assert outcomes["good-2"].result(timeout=0) == {"n": 2}
    assert scheduler.work("no spaces allowed!") is None


def test_a_batch_whose_append_fails_is_retried_one_by_one(
    scheduler: rota.Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_append = scheduler.store.append

    def append(events: Sequence[NewEvent], expected: dict[str, int]) -> AppendResult:
        if any(e.stream == "work/poison" for e in events):
            raise StoreUnavailable("the disk refused this transaction")
        return real_append(events, expected)

    monkeypatch.setattr(scheduler.store, "append", append)
    gate, sizes, _, first_threads = gate_first_commit(
        scheduler, lambda: scheduler.submit("lead", binding="job")
    )
    calls: dict[str, Callable[[], rota.WorkHandle]] = {
        name: (lambda name=name: scheduler.submit(name, binding="job"))
        for name in ("a", "poison", "b")
    }
    outcomes, threads = submit_in_threads(calls)
    queued(scheduler._submits, 3)
    gate.set()
    for thread in [*first_threads, *threads]:
        thread.join(timeout=30)
    assert sizes == [1, 3, 1, 1, 1]  # the batch of 3 failed, then each alone
    assert isinstance(outcomes["a"], rota.WorkHandle)
    assert isinstance(outcomes["b"], rota.WorkHandle)
    poison = outcomes["poison"]
    assert isinstance(poison, StoreUnavailable) and poison.code == "store_unavailable"
    assert scheduler.work("poison") is None and scheduler.work("a") is not None


def test_many_threads_submitting_the_same_input_accept_it_once(
    scheduler: rota.Scheduler,
) -> None:
    head = scheduler.store.head().position
    barrier = threading.Barrier(8)

    def same() -> rota.WorkHandle:
        barrier.wait(timeout=30)
        return scheduler.submit("w", binding="job", input={"order": 7}, input_key="order-7")

    outcomes, threads = submit_in_threads({f"t{n}": same for n in range(8)})
    for thread in threads:
        thread.join(timeout=30)
    handles = list(outcomes.values())
    assert all(isinstance(h, rota.WorkHandle) for h in handles), handles
    assert scheduler.store.head().position == head + 1  # submitted with its input, once
    assert len({h.input_position for h in handles if isinstance(h, rota.WorkHandle)}) == 1
    scheduler.run_until_idle(timeout=30)
    again = scheduler.submit("w", binding="job", input={"order": 7}, input_key="order-7")
    assert again.result(timeout=0) == {"order": 7}  # retried after it ran: a no-op
    assert scheduler.store.head().position > head + 2
    view = scheduler.work("w")
    assert view is not None and len(view.attempts) == 1


def test_eight_threads_share_transactions(scheduler: rota.Scheduler) -> None:
    per_thread = 25
    barrier = threading.Barrier(8)

    def worker(t: int) -> list[rota.WorkHandle]:
        barrier.wait(timeout=30)
        return [scheduler.submit(f"t{t}-{n}", binding="other") for n in range(per_thread)]

    results: dict[int, list[rota.WorkHandle]] = {}
    threads = [
        threading.Thread(target=lambda t=t: results.__setitem__(t, worker(t))) for t in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(len(r) for r in results.values()) == 8 * per_thread
    assert len(scheduler.works()) == 8 * per_thread
    group = scheduler._submits
    assert group.batches < 8 * per_thread  # some submits shared a transaction
    assert group.grouped == 8 * per_thread


def test_submit_many_is_one_transaction_and_all_or_nothing(scheduler: rota.Scheduler) -> None:
    head = scheduler.store.head().position
    handles = scheduler.submit_many(
        [
            rota.Submission("a", "job", input={"n": 1}),
            {"work_id": "b", "binding": "job", "input": {"n": 2}, "input_key": "b-2"},
            rota.Submission("s", "job", kind="standing"),
        ]
    )
    assert [h.work_id for h in handles] == ["a", "b", "s"]
    assert handles[2].input_position is None  # standing, no input
    assert scheduler.store.head().position == head + 3  # each definition carries its input
    scheduler.run_until_idle(timeout=30)
    assert [h.result(timeout=0) for h in handles[:2]] == [{"n": 1}, {"n": 2}]
    before = scheduler.store.head().position
    with pytest.raises(rota.RotaError) as raised:
        scheduler.submit_many([rota.Submission("c", "job"), rota.Submission("bad id!", "job")])
    assert raised.value.code == "invalid_work_id"
    assert scheduler.store.head().position == before and scheduler.work("c") is None
    assert scheduler.submit_many([]) == []


def _fake_group(window: float) -> tuple[SubmitGroup, list[tuple[str, list[str]]]]:
    """A group over a commit that records, per transaction, its thread and Works."""
    commits: list[tuple[str, list[str]]] = []

    def commit(requests: Sequence[SubmitWork]) -> list[Any]:
        commits.append((threading.current_thread().name, [r.work_id for r in requests]))
        return [AppendResult([], 1) for _ in requests]

    return SubmitGroup(commit, window=window), commits


def _submitting(group: SubmitGroup, work_id: str) -> threading.Thread:
    request = SubmitWork(work_id=work_id, binding="job", inputs=(WorkInput({"k": work_id}),))
    thread = threading.Thread(target=group.submit, args=(request,), name=work_id)
    thread.start()
    return thread


def test_the_caller_completing_a_batch_commits_it_on_its_own_thread() -> None:
    group, commits = _fake_group(window=60.0)  # only a full batch commits within the test
    for _ in range(3):
        group.arrive()
    first, second = _submitting(group, "a"), _submitting(group, "b")
    queued(group, 2)
    assert commits == []  # two of three expected: the first waits for the rest
    third = _submitting(group, "c")
    for thread in (first, second, third):
        thread.join(30)
    assert commits == [("c", ["a", "b", "c"])]  # the last arrival committed: nobody woken
    assert group.batches == 1 and group.grouped == 3


def test_a_caller_that_leaves_lets_the_waiting_batch_commit() -> None:
    group, commits = _fake_group(window=60.0)
    group.arrive()
    group.arrive()
    first = _submitting(group, "a")
    queued(group, 1)
    group.leave()  # refused before it submitted: nobody else is coming
    first.join(30)
    assert not first.is_alive() and commits == [("a", ["a"])]


def test_the_first_caller_commits_what_is_queued_when_its_window_ends() -> None:
    group, commits = _fake_group(window=0.01)
    for _ in range(3):
        group.arrive()  # three expected; one comes
    first = _submitting(group, "a")
    first.join(30)
    assert not first.is_alive() and commits == [("a", ["a"])]
    group.leave()
    group.leave()
