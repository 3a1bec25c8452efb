"""What-if from history: a recorded export's workload replayed under another configuration.

The recorded export is a clean simulated run (one host, no faults, chaos, operators,
reloads or schedules): 40 Works over six minutes on the simulator's five bindings and
three scopes, with contended pools, so admission order and waits are decided by the
limits. Three more add what the simulator's operators do (cancels of running attempts,
retries, interrupts), schedules and configuration reloads.
Their configuration is written as a rota.toml from the simulator's own settings,
bindings and budgets (`rota.testing.sim.workload`), and halved from there.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rota.domain.policy import Binding, Registration, Settings
from rota.infrastructure.config import Config, ConfigError
from rota.testing.sim import cli
from rota.testing.sim.recorded import Attempt, Recording, Work, read_export
from rota.testing.sim.whatif import Processes, ReplayExecutor, replay
from rota.testing.sim.whatif_report import (
    calibration,
    inferred_plan,
    plan_from_config,
    plan_of,
    pool_peaks,
    what_if,
)
from rota.testing.sim.workload import Shape, bindings, budgets, settings
from rota.testing.sim.world import World

# Without flow control (`flow=False`): what-if replays no keys, priorities or throttles.
SHAPE = Shape(
    hosts=1, works=40, schedules=0, hours=0.1, operators=0, chaos=0, reloads=0, faults=False,
    flow=False,
)  # fmt: skip
BUSY = Shape(hosts=1, works=40, schedules=2, hours=0.1, faults=False, flow=False)
OPERATED = (9, 13, 20)  # seeds whose operators cancel, retry and interrupt between them


def recorded_export(directory: Path, seed: int, shape: Shape = SHAPE) -> Path:
    world = World(seed, shape, keep=True)
    assert world.run().violation is None
    path = directory / f"seed-{seed}-{'operated' if shape.operators else 'clean'}.jsonl"
    world.export(path)
    return path


def toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string, number, bool or list of those is TOML too


def config_text(limits: Settings, named: dict[str, Binding]) -> str:
    """A rota.toml holding `limits`, `named` and the simulator's budgets."""
    lines = ["[settings]"]
    for key in ("concurrency", "job_concurrency", "lease_seconds", "timeout_seconds"):
        lines.append(f"{key} = {toml(getattr(limits, key))}")
    for path, limit in limits.scope_limits.items():
        lines += ["[[scopes]]", f"path = {toml(path)}", f"limits = {{ concurrency = {limit} }}"]
    for budget in budgets():
        lines.append("[[budgets]]")
        for key in ("id", "unit", "max", "per", "period"):
            lines.append(f"{key} = {toml(getattr(budget, key))}")
    for binding in named.values():
        retry = binding.retry
        lines += [
            "[[bindings]]",
            f"name = {toml(binding.name)}",
            f"executor = {toml(binding.executor)}",
            f"timeout_seconds = {toml(binding.timeout_seconds)}",
            f"retry = {{ max_attempts = {retry.max_attempts}, "
            f"delays = {toml(list(retry.delays or ()))}, "
            f"retry_on_lost = {toml(retry.retry_on_lost)} }}",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("whatif")
    recorded = settings()
    halved = msgspec.structs.replace(
        recorded,
        concurrency=recorded.concurrency // 2,
        job_concurrency=max(1, recorded.job_concurrency // 2),
    )
    found = {
        "export": recorded_export(directory, 3),
        "other": recorded_export(directory, 9),
        **{f"operated-{n}": recorded_export(directory, n, BUSY) for n in OPERATED},
    }
    for name, limits in (("recorded", recorded), ("halved", halved)):
        found[name] = directory / f"{name}.toml"
        found[name].write_text(config_text(limits, bindings(0)), encoding="utf-8")
    return found


@pytest.mark.parametrize("export", ["export", "other", *(f"operated-{n}" for n in OPERATED)])
def test_replay_under_recorded_config_reproduces_admission_order(
    files: dict[str, Path], export: str
) -> None:
    report = what_if(files[export], None, files["recorded"])
    assert report["calibration"]["claims"] > SHAPE.works
    assert report["calibration"] == {
        "match": True,
        "claims": report["calibration"]["claims"],
        "first_divergence": None,
    }


def test_operators_commands_are_replayed_at_their_moment(files: dict[str, Path]) -> None:
    kinds = set()
    for seed in OPERATED:
        recorded = read_export(files[f"operated-{seed}"])
        kinds |= {kind for _, kind, _, _ in recorded.operations}
        simulated = replay(recorded, plan_from_config(files["recorded"], recorded))
        again = [(round(t, 1), kind, work) for t, kind, work, _ in simulated.operations]
        assert again == [(round(t, 1), kind, work) for t, kind, work, _ in recorded.operations]
    assert kinds == {"cancel", "retry", "interrupt"}


@pytest.mark.parametrize("export", ["export", "operated-13"])
def test_replayed_attempts_take_their_recorded_duration(
    files: dict[str, Path], export: str
) -> None:
    recorded = read_export(files[export])
    simulated = replay(recorded, plan_from_config(files["recorded"], recorded))
    for work in recorded.works.values():
        again = simulated.works[work.work_id]
        assert again.first_claim == pytest.approx(work.first_claim, abs=0.01)
        assert (again.completed_at is None) == (work.completed_at is None)
        if work.completed_at is not None:
            assert again.completed_at == pytest.approx(work.completed_at, abs=0.01)


def test_halved_pool_limit_reports_longer_waits_for_the_same_completions(
    files: dict[str, Path],
) -> None:
    report = what_if(files["export"], files["halved"], files["recorded"])
    assert report["calibration"]["match"] is True
    overall = report["groups"]["all"]["all"]
    assert overall["simulated"]["mean_wait_s"] > overall["recorded"]["mean_wait_s"]
    assert overall["simulated"]["p95_wait_s"] > overall["recorded"]["p95_wait_s"]
    assert overall["simulated"]["completed"] == overall["recorded"]["completed"]
    recorded = read_export(files["export"])
    assert set(report["groups"]["binding"]) == {w.binding for w in recorded.works.values()}
    simulated = replay(recorded, plan_from_config(files["halved"], recorded))
    done = {w.work_id for w in recorded.works.values() if w.completed_at is not None}
    assert {w.work_id for w in simulated.works.values() if w.completed_at is not None} == done
    peaks = pool_peaks(simulated)
    assert peaks["agents"] <= 2 and peaks["jobs"] <= 1


def test_calibration_names_the_first_divergence(files: dict[str, Path]) -> None:
    recorded = read_export(files["export"])
    other = read_export(files["export"])
    (t1, w1, a1), (t2, w2, a2) = other.claims[3], other.claims[4]
    other.claims[3], other.claims[4] = (t1, w2, a2), (t2, w1, a1)
    found = calibration(recorded, other)
    assert found["match"] is False
    assert found["first_divergence"] == {
        "index": 3,
        "recorded": f"{w1}/{a1}",
        "simulated": f"{w2}/{a2}",
    }


def test_inferred_config_bounds_pools_by_what_the_log_held(files: dict[str, Path]) -> None:
    recorded = read_export(files["export"])
    plan = inferred_plan(recorded)
    limits = settings()
    assert 1 <= plan.settings.concurrency <= limits.concurrency
    assert 1 <= plan.settings.job_concurrency <= limits.job_concurrency
    assert set(plan.bindings) == {w.binding for w in recorded.works.values()}
    assert plan.budgets == tuple(budgets())
    simulated = replay(recorded, plan)
    assert len(simulated.works) == len(recorded.works)


def test_cli_prints_the_report_as_json(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--workload-from", str(files["export"]), "--recorded-config", str(files["recorded"])]
    code = cli.main([*argv, "--config", str(files["halved"]), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["calibration"]["match"] is True
    assert report["config"] == str(files["halved"])
    assert set(report["groups"]["scope"]) == {"root", "team-a", "team-b"}
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "admission order matches" in text and "by binding" in text


def test_missing_export_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="does not exist"):
        cli.main(["--workload-from", str(tmp_path / "none.jsonl")])


def test_config_without_the_exports_bindings_is_refused(
    files: dict[str, Path], tmp_path: Path
) -> None:
    alien = tmp_path / "alien.toml"
    alien.write_text('[[bindings]]\nname = "other"\nexecutor = "sim-calls"\n', "utf-8")
    argv = ["--workload-from", str(files["export"]), "--config", str(alien)]
    with pytest.raises(SystemExit, match="defines no binding named calls-once, calls-retry"):
        cli.main(argv)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(
        config_text(settings(), bindings(0)).replace('"sim-jobs"', '"not-recorded"'), "utf-8"
    )
    recorded = read_export(files["export"])
    with pytest.raises(ConfigError, match="not-recorded"):
        plan_from_config(wrong, recorded)


def test_config_options_need_an_export(files: dict[str, Path]) -> None:
    with pytest.raises(SystemExit, match="go with --workload-from"):
        cli.main(["--config", str(files["halved"])])


def test_replay_executor_scripts_attempts_the_log_did_not_have() -> None:
    registration = Registration(name="sim-calls")
    recording = Recording(start=datetime(2026, 3, 29, tzinfo=UTC))
    work = Work("w1", "b", "root", "run-once", "all", "undeclared", (), 0.0)
    work.attempts[1] = Attempt(1, 10.0, "agents", registration, 14.0, "failed", "exit_2")
    work.attempts[2] = Attempt(2, 20.0, "agents", registration, 26.0, "completed")
    running = Work("w2", "b", "root", "run-once", "all", "undeclared", (), 0.0)
    running.attempts[1] = Attempt(1, 30.0, "agents", registration)
    never = Work("w3", "b", "root", "run-once", "all", "undeclared", (), 50.0)
    recording.works.update(w1=work, w2=running, w3=never)
    executor = ReplayExecutor(registration, recording, Processes(lambda: 0.0))
    length, result = executor.script("w1/1")
    assert (length, result.outcome, result.error_code) == (4.0, "failed", "exit_2")
    assert executor.script("w1/2")[0] == 6.0
    assert executor.script("w1/3") == executor.script("w1/2")  # past the log: its last
    assert executor.script("w2/1")[0] == float("inf")  # still running when the log ended
    length, result = executor.script("w3/1")
    assert (length, result.outcome) == (5.0, "completed")  # never started: the mean


HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def test_a_scenario_log_calibrates_under_its_own_config() -> None:
    """A log rota wrote in a real scenario (tests/histories: in-process executors, a
    crash and its recovery): its config has no [[bindings]], so the pinned ones are kept."""
    expected = json.loads((HISTORIES / "expected.json").read_text("utf-8"))
    recorded = read_export(HISTORIES / "recovery.jsonl")
    plan = plan_of(Config.parse(expected["histories"]["recovery"]["config"]), recorded)
    assert plan.bindings == recorded.bindings
    assert calibration(recorded, replay(recorded, plan))["match"] is True


def test_a_command_the_engine_refuses_in_the_replay_is_skipped_and_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["--workload-from", str(HISTORIES / "lifecycle.jsonl"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert list(report["skipped"]) == ["calibration"]
    assert any("accepts no more input" in line for line in report["skipped"]["calibration"])
