"""The simulator itself: a seed names one run (same log, byte for byte, in this process
and in two others with different hash seeds), a budget of seeds runs clean, every fault
kind is reached, a violation is reported with its seed, invariant, positions and replay
command, `--until` replays a prefix exactly, and regression cases stay clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trial_scale import scale

from rota.application.ports import RawRecord, RecordedEvent
from rota.testing.sim import cli
from rota.testing.sim.invariants import Checker, Violation
from rota.testing.sim.workload import Shape
from rota.testing.sim.world import World

REGRESSIONS = Path(__file__).parent / "regressions"
REACHED = (
    "core.execution.recovered",
    "core.execution.adopted",
    "core.execution.lost",
    "core.execution.recovery_failed",
    "core.execution.stop_confirmed",
    "core.execution.timed_out",
    "core.execution.released",
    "core.retry.fired",
    "core.work.cancelled",
    "core.schedule.fired",
    "core.schedule.skipped",
    "core.schedule.leader_lost",
    "core.schedule.leader_released",
    "core.budget.exceeded",
    "core.flow.configured",  # flow control (Shape.flow): keys' slots and rate buckets taken
    "core.capacity.key_claimed",
    "core.rate.taken",
)
SEEDS = scale(6, 300, "ROTA_SIM_SEEDS")  # 6 reach every fault kind (flow workload: ~6 s a seed)
SHORT = Shape(hours=0.5)


def exported(seed: int, shape: Shape, path: Path) -> bytes:
    world = World(seed, shape, keep=True)
    assert world.run().violation is None
    world.export(path)
    return path.read_bytes()


def test_the_same_seed_writes_the_same_log_byte_for_byte(tmp_path: Path) -> None:
    first = exported(5, SHORT, tmp_path / "a.jsonl")
    again = exported(5, SHORT, tmp_path / "b.jsonl")
    other = exported(6, SHORT, tmp_path / "c.jsonl")
    assert first == again
    assert first != other
    assert first.count(b"\n") > 300  # a real run, not an empty log


def test_the_same_seed_writes_the_same_log_in_other_processes(tmp_path: Path) -> None:
    # Seed 7 over one hour (without flow control) is the run that found stop verification
    # iterating a set in hash order (tests/sim/regressions/seed-7.json); with flow control,
    # whose keys and buckets are dicts too: other hash seeds, same bytes.
    mine = exported(7, Shape(hours=1.0), tmp_path / "here.jsonl")
    for hash_seed in ("1", "7"):
        out = tmp_path / f"there-{hash_seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        command = [sys.executable, "-P", "-m", "rota.testing.sim", "--seed", "7"]
        command += ["--hours", "1", "--export", str(out)]
        done = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert out.read_bytes() == mine, f"PYTHONHASHSEED={hash_seed} wrote another log"


def test_a_budget_of_seeds_runs_clean_and_reaches_every_fault_kind() -> None:
    faults: dict[str, int] = {}
    counts: dict[str, int] = {}
    types: dict[str, int] = {}
    for seed in range(1, SEEDS + 1):
        outcome = World(seed, Shape(hours=2.0)).run()
        found = outcome.violation
        assert found is None, f"seed {seed}: {found}: {cli.replay_command(seed, Shape(hours=2))}"
        for name, n in outcome.faults.items():
            faults[name] = faults.get(name, 0) + n
        for name, n in outcome.counts.items():
            counts[name] = counts.get(name, 0) + n
        for name, n in outcome.types.items():
            types[name] = types.get(name, 0) + n
        defined = outcome.types.get("core.schedule.defined", 0)
        assert defined >= Shape().schedules, f"seed {seed}: {defined} schedules defined"
    # Sometimes-assertions: the runs reached every kind of fault, not just ran clean.
    for kind in ("crash_before_append", "crash_after_append", "append_error", "read_error"):
        assert faults.get(kind, 0) > 0, f"no {kind} in {SEEDS} seeds: {faults}"
    for kind in ("launch_error", "launch_ambiguous", "unacknowledged", "stop_unknown", "slow"):
        assert faults.get(kind, 0) > 0, f"no {kind} in {SEEDS} seeds: {faults}"
    for kind in ("crashes", "pauses", "graceful restarts", "clock steps"):
        assert counts.get(kind, 0) > 0, f"no {kind} in {SEEDS} seeds: {counts}"
    # ... and the engine answered them in every way: recovery, loss, retry, stops, holds.
    for kind in REACHED:
        assert types.get(kind, 0) > 0, f"no {kind} in {SEEDS} seeds: {sorted(types)}"


class Tripwire(Checker):
    """A checker that reports a violation at the 150th event (a stand-in for a bug)."""

    def observe(self, recorded: RecordedEvent, raw: RawRecord | None = None) -> list[Violation]:
        found = super().observe(recorded, raw)
        if recorded.position == 150:
            return [Violation("tripwire", "the 150th event", (149, 150))]
        return found


def test_a_violation_stops_the_run_and_says_how_to_replay_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("rota.testing.sim.checks.Checker", Tripwire)
    code = cli.main(["--seed", "3", "--hours", "0.5", "--regressions", str(tmp_path)])
    assert code == 1
    out = capsys.readouterr().out
    assert "seed 3: " in out and "VIOLATION of tripwire at positions 149, 150" in out
    assert "replay: python -m rota.testing.sim --seed 3 --hours 0.5 --until 150" in out
    involved = [row for row in out.splitlines() if row.startswith(("  149 ", "  150 "))]
    assert len(involved) == 2 and all('{"type":"core.' in row for row in involved)
    case = json.loads((tmp_path / "seed-3.json").read_text())
    assert case["seed"] == 3 and case["shape"]["hours"] == 0.5 and case["shape"]["flow"]
    assert case["found"]["invariant"] == "tripwire" and case["found"]["positions"] == [149, 150]
    assert case["expected"] == "clean"


def test_until_replays_a_prefix_of_the_same_run(tmp_path: Path) -> None:
    whole = World(4, SHORT, keep=True)
    whole.run()
    part = World(4, SHORT, until=200, keep=True)
    outcome = part.run()
    assert outcome.violation is None and 200 <= outcome.events < whole.outcome.events
    ours, theirs = whole.log.read_raw(0, 200), part.log.read_raw(0, 200)
    assert [r.hash for r in ours] == [r.hash for r in theirs]
    whole.export(tmp_path / "a")
    part.export(tmp_path / "b")


def test_the_json_report_names_seeds_invariants_events_time_and_digests(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Seeds 11 and 12 of the shape before flow control (`--no-flow`): seed 12 with flow
    # control finds a schedule bug (a runner's skip over a time a backfill fired).
    argv = ["--seeds", "2", "--first", "11", "--hours", "0.25", "--no-flow", "--json"]
    assert cli.main(argv) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert report["seeds"] == [11, 12] and report["violations"] == 0
    assert {"one_live_attempt", "capacity_respected", "acknowledged_not_lost"} <= set(
        report["invariants"]
    )
    assert report["events"] == sum(r["events"] for r in report["runs"]) > 0
    assert report["simulated_hours"] >= 0.5 and report["events_per_second"] > 0
    assert all(len(r["digest"]) == 64 and r["violation"] is None for r in report["runs"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0"], "--seeds must be positive, got 0"),
        (["--hours", "-1"], "--hours must be positive, got -1.0"),
        (["--seeds", "2", "--until", "5"], "--export and --until need one run: give --seed"),
        (["--sqlite", "/nonexistent/x"], "--sqlite /nonexistent/x: not a folder; create it first"),
    ],
)
def test_bad_options_are_refused_with_what_to_change(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert str(refused.value) == message


@pytest.mark.parametrize("case", sorted(REGRESSIONS.glob("seed-*.json")), ids=lambda p: p.stem)
def test_regression_cases_stay_clean(case: Path) -> None:
    recorded = json.loads(case.read_text())
    # A case recorded before flow control names no `flow`: its seed replays as it ran then.
    outcome = World(recorded["seed"], Shape(**{"flow": False, **recorded["shape"]})).run()
    assert recorded["expected"] == "clean"
    assert outcome.violation is None, f"{case.name} ({recorded['found']}): {outcome.violation}"


def test_a_run_on_sqlite_files_is_clean_and_names_one_log(tmp_path: Path) -> None:
    # Every host opens its own connection to one SQLite file, as daemons on one machine do.
    first = World(3, SHORT, sqlite=tmp_path).run()
    again = World(3, SHORT, sqlite=tmp_path).run()
    assert first.violation is None and first.events > 300
    assert first.head_hash == again.head_hash
    assert len(list(tmp_path.glob("rota-sim-3-*.db"))) == 2
