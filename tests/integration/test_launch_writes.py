"""Group commit of launch writes (issue 18 item 4): concurrent fenced phase writes share one
append; a refused write is refused to its caller alone; the log holds every other one."""

from __future__ import annotations

import threading

import rota
from rota.domain import lifecycle
from rota.domain.errors import LeaseLost, Refusal

WORKS = 4


def test_queued_phase_writes_share_one_append_and_a_stale_one_is_refused_alone() -> None:
    scheduler = rota.open("memory://", config={"settings": {"concurrency": 8}})
    try:
        scheduler.register("job", lambda ctx: None)
        for k in range(WORKS):
            scheduler.submit(f"w{k}", binding="job", input={"k": k})
        commands = scheduler.service.lifecycle
        claimed = commands.start_pass(16).claimed
        assert len(claimed) == WORKS
        grouped = commands.grouped
        tx = scheduler.service.lifecycle.tx
        errors: dict[str, BaseException | None] = {}

        def write(execution_id: str, epoch: int) -> None:
            try:
                grouped.write(
                    execution_id,
                    lambda w, n, now: [lifecycle.begin_phase(w, n, epoch, now, "prepare")],
                )
                errors[execution_id] = None
            except Refusal as refusal:
                errors[execution_id] = refusal

        stale = claimed[0].attempt.execution_id
        writers = [
            threading.Thread(
                target=write,
                args=(c.attempt.execution_id, c.attempt.epoch + (c.attempt.execution_id == stale)),
            )
            for c in claimed
        ]
        head = scheduler.store.head().position
        with tx.lock:  # an append in progress: the writes queue up behind it
            for writer in writers:
                writer.start()
            while len(grouped._queue) < WORKS:
                writers[0].join(0.005)
        for writer in writers:
            writer.join(30)
        assert grouped.appends == 1 and grouped.writes == WORKS
        assert isinstance(errors.pop(stale), LeaseLost)
        assert set(errors.values()) == {None}
        new = scheduler.store.read(head)
        assert [e.type for e in new] == ["core.execution.phase_began"] * (WORKS - 1)
        assert len({e.position for e in new}) == WORKS - 1
    finally:
        scheduler.close()


def test_a_phase_start_not_waited_for_shares_the_launchs_next_append_in_order() -> None:
    """A phase start queued with wait=False is appended with the same Work's next write,
    which is decided on the state the start leaves (one append, both events, in order)."""
    scheduler = rota.open("memory://", config={"settings": {"concurrency": 8}})
    try:
        scheduler.register("job", lambda ctx: None)
        scheduler.submit("w", binding="job", input={})
        commands = scheduler.service.lifecycle
        (claimed,) = commands.start_pass(16).claimed
        execution_id, epoch = claimed.attempt.execution_id, claimed.attempt.epoch
        grouped = commands.grouped
        head = scheduler.store.head().position
        commands.phase(execution_id, epoch, "executor", None, wait=False)
        assert grouped.appends == 0 and scheduler.store.head().position == head  # queued
        commands.phase(execution_id, epoch, "executor", "ok")  # decided after the start
        assert grouped.appends == 1 and grouped.writes == 2
        new = scheduler.store.read(head)
        assert [e.type for e in new] == [
            "core.execution.phase_began",
            "core.execution.phase_ended",
        ]
        # a stale start (wrong epoch) not waited for is refused alone, and only logged
        commands.phase(execution_id, epoch + 1, "late", None, wait=False)
        commands.persist_recovery(execution_id, epoch, {"pid": 2})
        assert grouped.appends == 2
        assert [e.type for e in scheduler.store.read(head + 2)] == [
            "core.execution.recovery_persisted"
        ]
    finally:
        scheduler.close()


def test_a_batch_pins_in_one_append_and_its_commit_asks_no_pass() -> None:
    """`persist_recovery_many` pins several launches in one append, a stale one refused
    alone; the log watcher is told that a commit of launch writes alone needs no pass."""
    scheduler = rota.open("memory://", config={"settings": {"concurrency": 8}})
    try:
        scheduler.register("job", lambda ctx: None)
        for k in range(3):
            scheduler.submit(f"w{k}", binding="job", input={})
        commands = scheduler.service.lifecycle
        claimed = commands.start_pass(16).claimed
        items = [(c.attempt.execution_id, c.attempt.epoch, {"pid": 2}) for c in claimed]
        items[1] = (items[1][0], items[1][1] + 1, {"pid": 3})  # a stale epoch
        grouped, launches = commands.grouped, scheduler.host.launches
        head = scheduler.store.head().position
        answers = commands.persist_recovery_many(items)
        assert answers[0] is None and answers[2] is None
        assert isinstance(answers[1], LeaseLost)
        after = scheduler.store.head().position
        assert grouped.appends == 1 and after == head + 2
        assert launches.only_launch_writes(head, after)
        scheduler.submit("other", binding="job", input={})
        assert not launches.only_launch_writes(head, scheduler.store.head().position)
        assert not launches.only_launch_writes(head - 1, after)
    finally:
        scheduler.close()
