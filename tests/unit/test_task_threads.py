"""The launcher's threads: a task never waits behind another, and a thread whose task
ended takes the next one instead of a new thread starting per task."""

from __future__ import annotations

import threading

from rota.application.task_threads import TaskThreads


def test_a_task_never_waits_behind_a_stuck_one_and_threads_are_reused() -> None:
    pool = TaskThreads(idle_seconds=30.0)
    stuck, started = threading.Event(), threading.Event()
    idents: list[int] = []

    def wait() -> bool:
        idents.append(threading.get_ident())
        started.set()
        return stuck.wait(30.0)

    try:
        first = pool.submit(wait)
        assert started.wait(10)
        # the only thread is busy: the next task gets a thread of its own and runs now
        assert pool.submit(threading.get_ident).result(10) != idents[0]
        names = {pool.submit(threading.get_ident).result(10) for _ in range(20)}
        assert len(names) == 1  # one finished thread took every later task in turn
        assert idents[0] not in names
        assert pool.running() == 1  # the stuck one
    finally:
        stuck.set()
        pool.shutdown()
    assert first.result(1) is True


def test_an_idle_thread_ends_and_shutdown_runs_what_was_queued() -> None:
    pool = TaskThreads(idle_seconds=0.05)
    assert pool.submit(lambda: 1).result(10) == 1
    ended = threading.Event()
    for thread in list(pool._threads):
        threading.Thread(target=lambda t=thread: (t.join(10), ended.set())).start()
    assert ended.wait(10)  # no task for idle_seconds: the thread ended
    assert pool._threads == set()
    gate = threading.Event()
    results = [pool.submit(gate.wait, 10.0) for _ in range(3)]
    gate.set()
    pool.shutdown()
    assert [r.result(1) for r in results] == [True] * 3
