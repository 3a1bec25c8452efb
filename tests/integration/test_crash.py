"""Crash drills with real processes: the daemon running shell jobs is killed with SIGKILL at
random moments, restarted, and must converge without running any job's side effect twice.

Each trial kills `rota run` when the log reaches a randomly chosen position (so kills land
on claims, invoke markers, renewals and outcomes alike), restarts it with
`rota run --until-idle`, and then checks, from the log alone and the side-effect file:
every Work completed, within 3 lease durations of the restart; each job's command ran
exactly once (adoption, not re-execution); the hash chain holds; no double claim and no
capacity overrun at any position. Set ROTA_SEED to replay a run, ROTA_CRASH_TRIALS to scale.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trial_scale import scale

import rota as rota_api
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.audit import verify_chain

from .invariants import check_log

LEASE = 0.6
JOBS = 4
TRIALS = scale(50, 200, "ROTA_CRASH_TRIALS")

CONFIG = """\
[store]
url = "sqlite:///{db}"
[settings]
lease_seconds = {lease}
concurrency = 2
job_concurrency = 2
[[bindings]]
name = "effect"
executor = "shell"
command = [
    "sh", "-c",
    "echo \\"$ROTA_WORK_ID\\" >> {effects}; i=0; while [ $i -lt 200 ]; do i=$((i+1)); done",
]
"""


def rota(cwd: Path, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "--config", str(cwd / "rota.toml"), *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[arg-type]
    )


def trial(home: Path, rng: random.Random) -> None:
    db = home / "rota.db"
    effects = home / "effects.log"
    runs = home / "runs"
    (home / "rota.toml").write_text(CONFIG.format(db=db, lease=LEASE, effects=effects))
    env = {**os.environ, "TMPDIR": str(runs)}
    runs.mkdir()
    with rota_api.open(db, config=home / "rota.toml") as submitter:
        for n in range(JOBS):
            submitter.submit(f"job-{n}", binding="effect")
    with SQLiteStore(db) as store:
        start = store.head().position
        # Submitting wrote 2 events per job; a full run writes about 6 more per job.
        kill_at = start + rng.randint(1, JOBS * 6)
        daemon = rota(home, "run", env=env)
        try:
            deadline = time.monotonic() + 30
            while store.head().position < kill_at and time.monotonic() < deadline:
                if daemon.poll() is not None:
                    break
                store.wait_for_commit(store.head().position, 0.5)
        finally:
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=30)
        killed_at = store.head().position
    recovery = rota(home, "run", "--until-idle", "--timeout", "30", env=env)
    assert recovery.wait(timeout=60) == 0, recovery.stderr.read() if recovery.stderr else ""
    with SQLiteStore(db) as store:
        assert verify_chain(store).ok
        projection = check_log(store, {"jobs": 2})
        written = store.read(after=killed_at, limit=100_000)
    states = {w.work_id: w.state for w in projection.works.values()}
    assert set(states.values()) == {"completed"}, states
    lines = effects.read_text().split() if effects.exists() else []
    assert sorted(lines) == sorted(states), f"side effects {sorted(lines)}"
    # Convergence takes at most 3 lease durations, read in log time (the recovering daemon's
    # first event to its last), so a loaded machine's slow interpreter start does not count;
    # the margin is the four jobs' own running time.
    if written:
        took = (written[-1].recorded_time - written[0].recorded_time).total_seconds()
        assert took < 3 * LEASE + 3.0, took


@pytest.mark.slow
def test_sigkill_at_random_moments_converges_without_repeating_side_effects(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    for n in range(TRIALS):
        home = tmp_path / f"trial-{n:03d}"
        home.mkdir()
        try:
            trial(home, rng)
        except AssertionError as failure:
            raise AssertionError(f"trial {n} (ROTA_SEED={seed}): {failure}") from failure
