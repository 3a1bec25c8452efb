"""A cadence pass's appends share one fsync (rota.application.pass_sync), and nothing
outside the store acts on one of them before it is durable: the executor is called only
once its invoke marker is synced, and an executor forgets a kept result only once the
outcome is."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.application.pass_sync import PassSync
from rota.application.ports import Done, LaunchContext
from rota.domain.results import Result
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.durability import WalSync


class Recording(rota.Executor):
    """Completes every attempt at once, noting whether the log was durable when it was
    called and when it was told to forget."""

    name = "recording"
    quick_forget = True

    def __init__(self, sync: WalSync, *, inline: bool = True) -> None:
        self.sync = sync
        self.inline = inline  # called on the loop itself, else on a launcher thread
        self.launched: list[tuple[str, bool]] = []
        self.forgot: list[tuple[str, bool]] = []

    def _durable(self) -> bool:
        return self.sync.synced == self.sync.committed

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        self.launched.append((ctx.execution_id, self._durable()))
        done(Result(outcome="completed"))

    def forget(self, execution_id: str, epoch: int) -> None:
        self.forgot.append((execution_id, self._durable()))


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[rota.Scheduler]:
    clock = ManualClock(datetime(2026, 8, 1, 9, tzinfo=UTC))
    config: dict[str, Any] = {"settings": {"concurrency": 3}}
    with rota.open(tmp_path / "sync.db", clock=clock, config=config) as s:
        yield s


def wal_sync(scheduler: rota.Scheduler) -> WalSync:
    sync = scheduler.store._wal_sync  # type: ignore[attr-defined]
    assert isinstance(sync, WalSync)  # rota's default: synchronous FULL
    return sync


def test_a_pass_that_finishes_claims_and_invokes_takes_one_fsync(
    scheduler: rota.Scheduler,
) -> None:
    sync = wal_sync(scheduler)
    # Counted without the fsyncs a deferred commit begins at once (`WalSync.begin`, tested
    # in test_commit_sync.py): what the pass shares is the one wait for the disk.
    sync.early = False
    executor = Recording(sync)
    scheduler.register("job", executor=executor)
    for k in range(6):
        scheduler.submit(f"w-{k}", binding="job", input={"k": k})

    before, head = sync.fsyncs, scheduler.store.head().position
    first = scheduler.tick()  # claims of 3 Works, each carrying its invoke marker
    assert first.started == 3
    recorded = scheduler.store.read(head, 100)
    claims = [r.event for r in recorded if r.type == "core.execution.claimed"]
    assert [getattr(c, "invoked", None) is not None for c in claims] == [True] * 3
    assert sync.fsyncs == before + 1
    assert sync.synced == sync.committed  # the pass ends durable

    before = sync.fsyncs
    second = scheduler.tick()  # 3 outcomes, then 3 claims and their invoke markers
    assert (second.finished, second.started) == (3, 3)
    assert sync.fsyncs == before + 1
    assert sync.synced == sync.committed

    # Negative control: the same writes outside a pass wait for a sync each.
    before = sync.fsyncs
    third = scheduler.service.lifecycle.finish_many(
        [(e, 1, Result(outcome="completed")) for e in ("w-3/1", "w-4/1")]
    )
    scheduler.service.lifecycle.finish_many([("w-5/1", 1, Result(outcome="completed"))])
    assert third == {}
    assert sync.fsyncs == before + 2


@pytest.mark.parametrize("inline", [True, False])
def test_nothing_acts_on_a_write_of_the_pass_before_it_is_durable(
    scheduler: rota.Scheduler, inline: bool
) -> None:
    executor = Recording(wal_sync(scheduler), inline=inline)
    scheduler.register("job", executor=executor)
    for k in range(5):
        scheduler.submit(f"w-{k}", binding="job", input={"k": k})
    scheduler.run_until_idle()
    assert {w.state for w in scheduler.works()} == {"completed"}
    assert len(executor.launched) == 5
    assert all(durable for _, durable in executor.launched)  # invoke markers synced first
    assert sorted(e for e, _ in executor.forgot) == [f"w-{k}/1" for k in range(5)]
    assert all(durable for _, durable in executor.forgot)  # outcomes synced first


def test_durable_on_another_thread_leaves_the_pass_deferred(
    scheduler: rota.Scheduler,
) -> None:
    sync = wal_sync(scheduler)
    # What the pass defers, without the fsyncs a deferred commit begins at once on the
    # store's syncer thread (`WalSync.begin`), which may make a commit durable before the
    # pass asks: the assertions below are about who waits, not when the disk is done.
    sync.early = False
    passes = PassSync(scheduler.store)
    scheduler.register("job", lambda ctx: None)
    with passes.one_pass():
        scheduler.submit("w-a", binding="job")
        assert sync.synced < sync.committed  # deferred inside the pass
        other = threading.Thread(target=passes.durable)
        other.start()
        other.join()
        assert sync.synced < sync.committed  # not the pass's thread: nothing synced
        passes.durable()
        assert sync.synced == sync.committed
        scheduler.submit("w-b", binding="job")
        assert sync.synced < sync.committed  # deferred again after `durable()`
    assert sync.synced == sync.committed  # the pass's end syncs
