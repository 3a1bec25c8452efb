"""The fsync taken out of the write lock (sqlite.durability) and the catch-up read skipped
when nothing is new (`EventStore.nothing_after`): commits are durable before anyone is
told, one fsync covers the commits made before it, another connection's commit is seen,
and a group commit hands the lead on before it waits for the disk."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import rota
from rota.application.errors import StoreUnavailable
from rota.application.group_commit import SubmitGroup
from rota.application.ports import AppendResult, NewEvent
from rota.domain.events import WorkCancelled
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.sqlite.store import SQLiteStore


def event(work: str) -> NewEvent:
    return NewEvent(f"work-{work}", WorkCancelled(work_id=work, reason="test"), None)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "log.db")
    yield s
    s.close()


def test_full_syncs_every_commit_not_deferred(store: SQLiteStore) -> None:
    sync = store._wal_sync
    assert sync is not None
    before = sync.fsyncs
    store.append([event("a")])
    store.append([event("b")])
    assert sync.fsyncs == before + 2
    assert sync.synced == sync.committed


def test_deferred_commits_share_one_fsync_and_wait_for_sync(store: SQLiteStore) -> None:
    sync = store._wal_sync
    assert sync is not None
    sync.early = False  # no fsync begun at the commit (`WalSync.begin`: tested below)
    before = sync.fsyncs
    with store.deferring():
        store.append([event("a")])
        with store.deferring():
            store.append([event("b")])
        store.sync()  # an outer block is open: it syncs, not this
        assert sync.fsyncs == before
        assert sync.synced < sync.committed
    assert sync.synced < sync.committed  # leaving the block does not sync by itself
    store.sync()
    assert sync.fsyncs == before + 1
    assert sync.synced == sync.committed
    store.sync()  # nothing pending: no fsync
    assert sync.fsyncs == before + 1


def test_normal_and_extra_keep_sqlite_syncing(tmp_path: Path) -> None:
    for level in ("normal", "extra"):
        s = SQLiteStore(tmp_path / f"{level}.db", synchronous=level)  # type: ignore[arg-type]
        try:
            assert s._wal_sync is None
            s.append([event("a")])
            assert s.head().position == 1
        finally:
            s.close()


def test_nothing_after_knows_its_own_head_and_sees_other_connections(
    store: SQLiteStore, tmp_path: Path
) -> None:
    assert not store.nothing_after(0)  # never wrote an event: does not know
    store.append([event("a")])
    assert store.nothing_after(1)
    assert not store.nothing_after(0)
    other = SQLiteStore(tmp_path / "log.db")
    try:
        other.append([event("b")])
        assert not store.nothing_after(1)  # another connection committed
        assert not store.nothing_after(2)  # and our cached head is not the log's
        store.append([event("c")])
        assert store.head().position == 3
        assert store.nothing_after(3)
    finally:
        other.close()


def test_a_scheduler_sees_another_processes_write_despite_the_skip(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    with rota.open(path, owner="a") as a, rota.open(path, owner="b") as b:
        a.register("job", lambda ctx: None)
        b.register("job", lambda ctx: None)
        a.submit("w-1", binding="job", input={"k": 1})
        a.submit("w-2", binding="job", input={"k": 2})  # a skips its read: nothing new
        b.submit("w-3", binding="job", input={"k": 3})
        a.submit("w-4", binding="job", input={"k": 4})  # must read b's write first
        assert sorted(w.id for w in a.works()) == ["w-1", "w-2", "w-3", "w-4"]
        positions = [r.position for r in a.store.read(0, 100)]
        assert positions == list(range(1, len(positions) + 1))


class _GatedStore:
    """What SubmitGroup uses of a store that syncs after commit; `sync` can be held."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.syncing = threading.Event()
        self.fail: BaseException | None = None
        self._local = threading.local()

    def deferring(self) -> _Deferral:
        return _Deferral(self._local)

    def sync(self) -> None:
        if getattr(self._local, "depth", 0):
            return
        self.syncing.set()
        assert self.gate.wait(30)
        if self.fail is not None:
            raise self.fail


class _Deferral:
    def __init__(self, local: threading.local) -> None:
        self.local = local

    def __enter__(self) -> None:
        self.local.depth = getattr(self.local, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        self.local.depth -= 1


def _request(work_id: str) -> SubmitWork:
    return SubmitWork(work_id=work_id, binding="job", inputs=(WorkInput({"k": work_id}),))


def test_the_lead_moves_on_before_the_disk_and_callers_wait_for_it() -> None:
    store = _GatedStore()
    committed: list[str] = []
    second_committed = threading.Event()

    def commit(requests: Sequence[SubmitWork]) -> list[AppendResult]:
        committed.extend(r.work_id for r in requests)
        if "w-2" in committed:
            second_committed.set()
        return [AppendResult([], 1) for _ in requests]

    group = SubmitGroup(commit, store=store, window=0.0)  # type: ignore[arg-type]
    store.gate.clear()
    done: dict[str, object] = {}

    def call(work_id: str) -> None:
        group.arrive()
        try:
            done[work_id] = group.submit(_request(work_id))
        except BaseException as exc:
            done[work_id] = exc

    first = threading.Thread(target=call, args=("w-1",))
    first.start()
    assert store.syncing.wait(30)  # w-1 committed; its sync is held
    assert committed == ["w-1"] and "w-1" not in done  # not told before it is durable
    second = threading.Thread(target=call, args=("w-2",))
    second.start()
    # The lead was handed on: w-2 commits while w-1's fsync is still held.
    assert second_committed.wait(30)
    assert committed == ["w-1", "w-2"]
    assert not done
    store.fail = StoreUnavailable("the disk refused")
    store.gate.set()
    first.join(30)
    second.join(30)
    assert isinstance(done["w-1"], StoreUnavailable)
    assert isinstance(done["w-2"], StoreUnavailable)


def test_a_failed_sync_is_the_appenders_error(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rota.infrastructure.sqlite import durability

    def refuse(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durability, "_datasync", refuse)
    with pytest.raises(StoreUnavailable, match="cannot sync the log's WAL"):
        store.append([event("a")])
    monkeypatch.undo()
    store.append([event("b")])  # the next sync covers both commits
    sync = store._wal_sync
    assert sync is not None and sync.synced == sync.committed


def test_an_fsync_does_not_wait_for_one_in_progress_that_does_not_cover_it(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads' commits, the first's fsync held on the disk: the second issues its own
    beside it (the disk serves overlapping flushes together), and neither returns before
    its own commit is durable."""
    from rota.infrastructure.sqlite import durability

    sync = store._wal_sync
    assert sync is not None
    release, began = threading.Event(), threading.Semaphore(0)
    calls: list[int] = []
    real = durability._datasync

    def held(fd: int) -> None:
        calls.append(fd)
        began.release()
        if len(calls) == 1:
            assert release.wait(30)  # the first fsync stays on the disk
        real(fd)

    base = sync.committed  # the schema's commit
    monkeypatch.setattr(durability, "_datasync", held)
    done: list[str] = []

    def append(work: str) -> None:
        store.append([event(work)])
        done.append(work)

    first = threading.Thread(target=append, args=("a",))
    first.start()
    assert began.acquire(timeout=30)  # a committed; its fsync is held
    second = threading.Thread(target=append, args=("b",))
    second.start()
    assert began.acquire(timeout=30)  # b's fsync began while a's was still held
    second.join(30)
    assert done == ["b"]  # durable through its own fsync, which covered a's commit too
    assert sync.synced == base + 2 and len(calls) == 2
    release.set()
    first.join(30)
    assert sorted(done) == ["a", "b"]
    assert sync.synced == sync.committed == base + 2


def test_a_commit_an_fsync_in_progress_covers_waits_for_it(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread whose commit an fsync already on the disk covers waits for it, and issues
    none of its own; when that fsync fails, it syncs for itself."""
    from rota.infrastructure.sqlite import durability

    sync = store._wal_sync
    assert sync is not None
    sync.early = False  # the deferred commit below waits for the threads' syncs
    release, began = threading.Event(), threading.Event()
    calls: list[int] = []
    real = durability._datasync

    def held(fd: int) -> None:
        calls.append(fd)
        began.set()
        assert release.wait(30)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        real(fd)

    with store.deferring():
        store.append([event("a")])  # committed, not yet synced
    number = sync.committed
    fsyncs = sync.fsyncs
    errors: list[BaseException] = []

    def syncing() -> None:
        try:
            sync.sync(number)
        except StoreUnavailable as exc:
            errors.append(exc)

    monkeypatch.setattr(durability, "_datasync", held)
    first = threading.Thread(target=syncing)
    first.start()
    assert began.wait(30)  # its fsync (covering the commit) is on the disk
    waiting = threading.Event()
    real_wait = sync._cond.wait

    def wait(timeout: float | None = None) -> bool:
        waiting.set()
        return real_wait(timeout)

    monkeypatch.setattr(sync._cond, "wait", wait)
    covered = threading.Thread(target=sync.sync, args=(number,))
    covered.start()
    assert waiting.wait(30)  # the covered caller waits for the fsync in progress
    assert len(calls) == 1 and covered.is_alive()
    release.set()  # the first fsync fails: the covered caller syncs for itself
    first.join(30)
    covered.join(30)
    assert len(errors) == 1 and "cannot sync the log's WAL" in str(errors[0])
    assert len(calls) == 2 and sync.synced == number and sync.fsyncs == fsyncs + 1
    store.sync()  # this thread's pending commit: already durable, no fsync
    assert len(calls) == 2


def test_a_deferred_commit_begins_its_fsync_at_once_off_the_committing_thread(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`WalSync.begin`: the fsync of a deferred commit starts before anyone calls `sync`,
    on the syncer thread; the `sync` that follows waits for it (or finds it done) and
    issues none of its own; the commit is not reported durable before that fsync."""
    from rota.infrastructure.sqlite import durability

    sync = store._wal_sync
    assert sync is not None
    began, release = threading.Event(), threading.Event()
    threads: list[str] = []
    real = durability._datasync

    def held(fd: int) -> None:
        threads.append(threading.current_thread().name)
        began.set()
        assert release.wait(30)
        real(fd)

    monkeypatch.setattr(durability, "_datasync", held)
    before = sync.fsyncs
    with store.deferring(ahead=True):
        store.append([event("a")])
        assert began.wait(30)  # on the disk already, while the block is still open
        assert sync.synced < sync.committed  # held there: not durable yet
    release.set()
    store.sync()  # waits for the fsync begun (the thread's pending commit), issues none
    assert threads == ["rota-wal-sync"]
    assert sync.fsyncs == before + 1 and sync.synced == sync.committed
    # The store's own thread goes with it.
    syncer = sync._syncer
    assert syncer is not None
    store.close()
    syncer.join(30)
    assert not syncer.is_alive()


def test_a_plain_deferred_commit_leaves_its_fsync_to_sync_on_its_own_thread(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `ahead` (a transaction that only applies its own events before it waits),
    nothing is begun at the commit: no syncer thread, no fsync until `sync`, which issues
    it on the caller's thread. An `ahead` block around a plain one makes it begin."""
    from rota.infrastructure.sqlite import durability

    sync = store._wal_sync
    assert sync is not None
    threads: list[str] = []
    real = durability._datasync

    def recorded(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(durability, "_datasync", recorded)
    before = sync.fsyncs
    with store.deferring():
        store.append([event("a")])
    assert threads == [] and sync._syncer is None
    assert sync.synced < sync.committed  # committed, not durable, nothing on the disk
    store.sync()
    assert threads == [threading.current_thread().name]
    assert sync.fsyncs == before + 1 and sync.synced == sync.committed

    began = threading.Event()
    monkeypatch.setattr(durability, "_datasync", lambda fd: (began.set(), real(fd)))
    with store.deferring(ahead=True), store.deferring():
        store.append([event("b")])
        assert began.wait(30)  # begun by the syncer thread inside the plain block
    store.sync()
    assert sync.synced == sync.committed


def test_an_fsync_begun_that_fails_is_redone_by_the_sync_that_needs_it(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The syncer's failed fsync is not retried by the syncer (no loop on a bad disk):
    the caller's `sync` issues its own and raises its error; the next commit's sync,
    the disk well again, covers both commits."""
    from rota.infrastructure.sqlite import durability

    sync = store._wal_sync
    assert sync is not None
    failed = threading.Event()
    calls: list[str] = []

    def refuse(fd: int) -> None:
        calls.append(threading.current_thread().name)
        failed.set()
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durability, "_datasync", refuse)
    with store.deferring(ahead=True):
        store.append([event("a")])
        assert failed.wait(30)
    with pytest.raises(StoreUnavailable, match="cannot sync the log's WAL"):
        store.sync()
    assert calls == ["rota-wal-sync", threading.current_thread().name]
    monkeypatch.undo()
    store.append([event("b")])
    assert sync.synced == sync.committed
