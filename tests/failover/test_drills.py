"""Failover drills on this machine (issue 32): a real primary and streaming replica behind a
re-pointable proxy, two `rota run` daemons running shell jobs and a schedule, a client
submitting; each drill (`drills`) injects a fault, rota must go on without a restart, and
the log must hold every acknowledged Work once, run once, with nothing doubled.

`make test` runs the short form: one rig, every drill in turn on the same two daemons (the
database down when they start, then a planned switchover, an unplanned failover, the role
flip without closed sockets, half-open connections, an outage longer than the lease, and
asynchronous replication with a lagging replica). `make soak` (ROTA_SOAK=1) also runs each
drill on a rig of its own, with more load. The clusters are made with `initdb` in a
temporary directory (never the shared server) and destroyed afterwards. Without the
PostgreSQL server binaries the drills are skipped, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from trial_scale import SOAK, scale

from .cluster import Cluster, cluster, missing
from .drills import (
    Drill,
    database_down_at_start,
    half_open,
    lagging_replica,
    long_outage,
    planned_switchover,
    role_flip,
    unplanned_failover,
)
from .rig import Rig, rig

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
LEASE = 4.0  # seconds: the drills' lease (a failover must be over within 2 of them)
REPLY = 2.0  # seconds: [store] reply_timeout (a half-open connection is dropped after it)


@pytest.fixture
def pair() -> Iterator[Cluster]:
    why = missing()
    if why is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the failover drills, but {why}", pytrace=False)
        pytest.skip(why)
    with cluster() as made:
        yield made


def _report(rig_: Rig, results: list[Drill], pids: list[int]) -> None:
    rig_.assert_no_restart(pids)
    assert rig_.client is not None
    rig_.client.stop()
    rig_.drain()
    tally = rig_.verify()
    rig_.assert_no_restart(pids)
    print()
    for result in results:
        print(result.line(LEASE))
    print(tally.line(), f"; refused submits (retried) {dict(rig_.client.refusals)}")
    print(f"daemons: pids {pids}, never restarted")
    assert not tally.lost and not tally.doubled, (tally.lost[:10], tally.doubled[:10])
    assert tally.told and tally.fires and tally.completed
    for result in results:
        assert result.to_first_start < 2 * LEASE, result.line(LEASE)


def test_every_drill_in_turn_on_the_same_two_daemons(pair: Cluster, tmp_path: Path) -> None:
    with rig(pair, tmp_path, lease=LEASE, reply=REPLY) as r:
        results = [database_down_at_start(r)]
        pids = r.pids()
        client = r.open_client()
        client.start(pace=scale(0.25, 0.05))
        pair.synchronous(True)
        for drill in (planned_switchover, unplanned_failover, role_flip, half_open, long_outage):
            results.append(drill(r))
            r.assert_no_restart(pids)
        results.append(lagging_replica(r, lost=scale(5, 40)))
        _report(r, results, pids)


DRILLS = {
    "planned_switchover": planned_switchover,
    "unplanned_failover": unplanned_failover,
    "role_flip": role_flip,
    "half_open": half_open,
    "long_outage": long_outage,
}


@pytest.mark.skipif(not SOAK, reason="each drill on a rig of its own: make soak (ROTA_SOAK=1)")
@pytest.mark.parametrize("name", [*DRILLS, "lagging_replica", "database_down_at_start"])
def test_one_drill_on_a_rig_of_its_own(pair: Cluster, tmp_path: Path, name: str) -> None:
    with rig(pair, tmp_path, lease=LEASE, reply=REPLY) as r:
        if name == "database_down_at_start":
            results = [database_down_at_start(r)]
            pids = r.pids()
            r.open_client().start(pace=0.05)
        else:
            r.start_daemons()
            pids = r.pids()
            r.open_client().start(pace=0.05)
            pair.synchronous(True)
            r.first_start_after(0.0)  # running before the fault
            if name == "lagging_replica":
                results = [lagging_replica(r, lost=60)]
            else:
                results = [DRILLS[name](r)]
        _report(r, results, pids)
