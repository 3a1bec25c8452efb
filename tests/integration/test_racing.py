"""Several schedulers (threads and processes) racing on one SQLite file never create two
attempts for one Work and never exceed the concurrency limit, checked by replaying the log."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import rota
from rota.infrastructure.sqlite.store import SQLiteStore

from .invariants import check_log

CONFIG = {
    "settings": {"concurrency": 2, "lease_seconds": 30},
    "scopes": [{"path": "root/team", "limits": {"concurrency": 1}}],
    "budgets": [{"id": "attempts", "unit": "attempts", "max": 60, "per": "all"}],
}
WORKS = 80
ADMITTED = 60

CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    import rota
    path, name = sys.argv[1], sys.argv[2]
    config = {
        "settings": {"concurrency": 2, "lease_seconds": 30},
        "scopes": [{"path": "root/team", "limits": {"concurrency": 1}}],
        "budgets": [{"id": "attempts", "unit": "attempts", "max": 60, "per": "all"}],
    }
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    def work(ctx):
        deadline = time.monotonic() + 0.005
        while time.monotonic() < deadline:
            pass
        return {"by": name}
    with rota.open(path, config=config, owner=name) as scheduler:
        scheduler.register("race", work)
        print("ready", flush=True)
        scheduler.run(stop)
    """
)


def _busy(ctx: rota.LaunchContext) -> dict[str, str]:
    deadline = time.monotonic() + 0.005
    while time.monotonic() < deadline:
        pass
    return {"by": "thread"}


@pytest.mark.slow
def test_racing_schedulers_never_double_claim_nor_exceed_capacity(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    SQLiteStore(path).close()
    children = [
        subprocess.Popen(
            [sys.executable, "-P", "-c", CHILD, str(path), f"proc-{n}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    stop = threading.Event()
    ready = threading.Barrier(3)
    errors: list[BaseException] = []

    def thread_scheduler(name: str) -> None:
        try:
            with rota.open(path, config=CONFIG, owner=name) as scheduler:
                scheduler.register("race", _busy)
                ready.wait(timeout=60)
                scheduler.run(stop)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread_scheduler, args=(f"thread-{n}",)) for n in range(2)]
    for t in threads:
        t.start()
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    ready.wait(timeout=60)

    try:
        with rota.open(path, config=CONFIG, owner="submitter") as submitter:
            submitter.register("race", _busy, binding=True)
            for i in range(WORKS):
                scope = "root/team" if i % 4 == 0 else "root"
                submitter.submit(f"job-{i:03d}", binding="race", input={"i": i}, scope=scope)
            store = submitter.store
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                settled = [w for w in submitter.works() if w.state in ("completed", "held")]
                if len(settled) == WORKS:
                    break
                store.wait_for_commit(store.head().position, 1.0)
    finally:
        stop.set()
        for child in children:
            child.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=60)
        for child in children:
            assert child.wait(timeout=60) == 0
    assert not errors, errors

    with SQLiteStore(path) as store:
        projection = check_log(store, {"agents": 2}, {"root/team": 1})
    states = [w.state for w in projection.works.values()]
    assert states.count("completed") == ADMITTED, states
    assert states.count("held") == WORKS - ADMITTED
    assert projection.used("attempts", "all", "lifetime") == ADMITTED
    owners = {w.current.owner for w in projection.works.values() if w.current is not None}
    assert len(owners) >= 2, f"only {owners} ran work: the race did not happen"
    print(f"owners: {sorted(owners)}")
