"""Store contract under concurrency: threads and processes share one log.

Child processes are started with fork+exec (`subprocess`), never by forking a process that
holds a connection.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

from rota.application.errors import ConcurrencyConflict
from rota.application.ports import EventStore, NewEvent
from rota.domain.events import InputAccepted
from rota.replay.audit import verify_chain

from .conftest import OpenStore
from .helpers import accepted, submitted

CHILD = textwrap.dedent(
    """
    import sys
    from rota.domain.events import InputAccepted
    from rota.application.ports import NewEvent
    from rota.infrastructure.stores import open_store

    url, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(url)
    if mode == "wait":
        sys.stdin.readline()
    for i in range(count):
        key = "same" if mode == "same" else f"{mode}-{i}"
        event = InputAccepted(work_id="w", key="k", payload={"p": key})
        delivery = "input/w/same" if mode == "same" else None
        if mode == "same":
            event = InputAccepted(work_id="w", key="k", payload=None)
        store.append([NewEvent("work/" + key, event, delivery)])
    store.close()
    """
)


def _child(url: str, mode: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-P", "-c", CHILD, url, mode, str(count)],
        stdin=subprocess.PIPE,
        text=True,
    )


def test_same_delivery_identity_from_threads_and_processes_records_one_row(
    open_store: OpenStore, store_url: str
) -> None:
    store = open_store()
    children = [_child(store_url, "same", 100) for _ in range(3)]

    same = NewEvent("work/same", InputAccepted(work_id="w", key="k", payload=None), "input/w/same")

    def attempt(_: int) -> int:
        return store.append([same]).recorded[0].position

    with ThreadPoolExecutor(max_workers=8) as pool:
        positions = set(pool.map(attempt, range(700)))
    for child in children:
        assert child.wait(timeout=120) == 0
    assert len(positions) == 1
    rows = [e for e in store.read(limit=10_000) if e.delivery_id == "input/w/same"]
    assert len(rows) == 1
    assert store.head().position == 1


def test_concurrent_writers_keep_positions_gapless(open_store: OpenStore, store_url: str) -> None:
    store = open_store()
    children = [_child(store_url, f"p{n}", 150) for n in range(2)]

    def write(i: int) -> None:
        store.append([submitted(f"t{i}"), accepted(f"t{i}", 1)])

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(write, range(150)))
    for child in children:
        assert child.wait(timeout=120) == 0
    events = store.read(limit=10_000)
    assert [e.position for e in events] == list(range(1, 601))
    report = verify_chain(open_store())
    assert report.ok and report.checked == 600


def test_only_one_of_racing_expected_versions_wins(open_store: OpenStore) -> None:
    store = open_store()
    store.append([submitted("race")])
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def claim(n: int) -> None:
        handle = open_store()
        barrier.wait()
        try:
            handle.append([accepted("race", n + 1)], expected={"work/race": 1})
            outcomes.append("won")
        except ConcurrencyConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["won"]
    assert store.stream_version("work/race") == 2


def test_subscription_sees_a_commit_made_by_another_process(
    store: EventStore, store_url: str
) -> None:
    store.append([submitted("before")])
    subscription = store.subscribe(after=0, poll=0.05)
    assert next(subscription).position == 1
    child = _child(store_url, "wait", 1)
    received: list[int] = []

    def consume() -> None:
        received.append(next(subscription).position)

    reader = threading.Thread(target=consume)
    reader.start()
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.wait(timeout=60) == 0
    reader.join(timeout=60)
    assert received == [2]
    assert store.read(1)[0].stream == "work/wait-0"


def test_wait_for_commit_times_out_when_nothing_is_written(store: EventStore) -> None:
    assert store.wait_for_commit(0, timeout=0.05) is False
    store.append([submitted("x")])
    assert store.wait_for_commit(0, timeout=0.05) is True
