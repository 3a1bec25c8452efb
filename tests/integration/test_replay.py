"""Replay: verify and rebuild the stored projections, time travel, and `explain`, in Python
and as `rota` subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest

from rota.application.ports import EventStore
from rota.application.service import SchedulerService
from rota.application.timestamps import format_timestamp
from rota.domain.admission import GateDecision
from rota.domain.events.admission import Budget
from rota.domain.policy import Binding, Registration, RetryPolicy, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.stores import open_store
from rota.replay import state_at
from rota.replay.explain import Explanation, explain
from rota.replay.rebuild import rebuild, verify

T0 = datetime(2026, 7, 1, tzinfo=UTC)
BINDINGS = {
    "b": Binding(name="b", executor="x", retry=RetryPolicy(max_attempts=3)),
    "once": Binding(name="once", executor="x", retry=RetryPolicy(max_attempts=1)),
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def log(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[EventStore]:
    """In memory; a test that reads the log's files or runs the CLI on them asks for
    "sqlite" (indirect)."""
    store: EventStore
    if getattr(request, "param", "memory") == "sqlite":
        store = SQLiteStore(tmp_path / "rota.db", clock=clock, synchronous="normal")
    else:
        store = open_store("memory://", clock=clock)
    yield store
    store.close()


def service_on(log: EventStore, **settings: Any) -> SchedulerService:
    base: dict[str, Any] = {"lease_seconds": 60, "timeout_seconds": 300, **settings}
    service = SchedulerService(
        log,
        settings=Settings(**base),
        owner="t",
        bindings=BINDINGS,
        registrations={"x": Registration(name="x", capabilities=("interrupt",))},
    )
    service.catch_up()
    return service


def claimed(service: SchedulerService, work_id: str) -> tuple[str, int]:
    work = service.projection.works[work_id]
    assert work.current is not None
    return work.current.execution_id, work.current.epoch


def type_at(log: EventStore, position: int) -> str:
    return log.read(position - 1, 1)[0].type


def cited(found: Explanation, kind: str) -> list[int]:
    statement = next((s for s in found.statements if s.kind == kind), None)
    assert statement is not None, found.lines()
    return statement.positions


def two_works(service: SchedulerService) -> None:
    service.lifecycle.submit(SubmitWork(work_id="a", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.submit(SubmitWork(work_id="b", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.start_pass()


# -- verify and rebuild -------------------------------------------------------------------


@pytest.mark.parametrize("log", ["sqlite"], indirect=True)  # the projections file
def test_verify_is_ok_on_a_rebuilt_store_and_names_a_tampered_row(log: SQLiteStore) -> None:
    service = service_on(log, concurrency=1)
    two_works(service)
    path = default_path(log)
    assert path is not None
    with SQLiteProjectionStore(path) as projections:
        rebuild(log, projections)
        report = verify(log, projections)
        assert report.ok and report.drift is None
        assert {v.name: v.status for v in report.projections} == dict.fromkeys(
            ("scheduler", "history", "capacity", "holds", "budgets"), "ok"
        )
    tamper(path, "scheduler", "work/b", '"kind":"run-once"', '"kind":"standing"')
    with SQLiteProjectionStore(path) as projections:
        report = verify(log, projections)
        assert not report.ok
        assert report.drift is not None
        assert (report.drift.name, report.drift.first_key) == ("scheduler", "work/b")
        rebuild(log, projections, "scheduler")
        assert verify(log, projections).ok


def tamper(path: Path, projection: str, key: str, old: str, new: str) -> None:
    """Edit one stored row with plain SQL, as a bit flip or a careless hand would."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            f"UPDATE rows_{projection} "
            "SET value = CAST(replace(CAST(value AS TEXT), ?, ?) AS BLOB) WHERE key = ?",
            (old, new, key),
        )
        assert conn.changes() == 1
    finally:
        conn.close()


@pytest.mark.parametrize("log", ["sqlite"], indirect=True)  # the projections file
def test_verify_names_the_history_row_and_an_undecodable_row(log: SQLiteStore) -> None:
    service = service_on(log, concurrency=1)
    two_works(service)
    path = default_path(log)
    assert path is not None
    with SQLiteProjectionStore(path) as projections:
        rebuild(log, projections)
    tamper(path, "history", "attempt/a/1", '"owner":"t"', '"owner":"x"')
    tamper(path, "scheduler", "work/a", '"work_id"', '"work_id":')
    with SQLiteProjectionStore(path) as projections:
        report = verify(log, projections)
        by_name = {v.name: v for v in report.projections}
        assert by_name["history"].status == "drift"
        assert by_name["history"].first_key == "attempt/a/1"
        assert by_name["scheduler"].status == "drift"
        assert by_name["scheduler"].first_key == "work/a"
        rebuild(log, projections)
        assert verify(log, projections).ok


# -- time travel --------------------------------------------------------------------------


def test_state_at_a_position_and_a_time_before_and_after_a_claim(
    log: EventStore, clock: ManualClock
) -> None:
    service = service_on(log)
    service.lifecycle.submit(SubmitWork(work_id="a", binding="b", inputs=(WorkInput(None, "s"),)))
    before = log.head().position
    between = clock.advance(30)
    clock.advance(30)
    service.lifecycle.start_pass()
    after = log.head().position
    early, late = state_at(log, position=before), state_at(log, position=after)
    assert early["scheduler"]["works"]["a"]["state"] == "ready"
    assert early["scheduler"]["ready"] == ["a"]
    assert early["capacity"]["pools"]["agents"]["in_use"] == 0
    assert late["scheduler"]["works"]["a"]["state"] == "running"
    assert late["scheduler"]["live"] == {"a/1": "a"}
    assert late["capacity"]["pools"]["agents"]["holders"] == ["a/1"]
    by_time = state_at(log, time=between)
    assert by_time == {**early, "recorded_at": by_time["recorded_at"]}
    assert by_time["position"] == before
    assert state_at(log, time=format_timestamp(clock.now()))["position"] == after
    assert state_at(log, time=T0 - timedelta(days=1))["scheduler"]["works"] == {}


def test_state_at_shows_holds(log: EventStore) -> None:
    service = service_on(log)
    service.lifecycle.submit(SubmitWork(work_id="g", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.start_pass(
        gated=True, gates={"g": GateDecision("hold", "approver", "needs a human")}
    )
    state = state_at(log, position=log.head().position)
    assert state["holds"] == [
        {
            "work": "g",
            "kind": "gate",
            "reason": "needs a human",
            "holder": "approver",
            "position": log.head().position,
        }
    ]


# -- explain ----------------------------------------------------------------------------


def test_explain_waiting_for_capacity_cites_the_slot_holders_claims(log: EventStore) -> None:
    service = service_on(log, concurrency=1)
    two_works(service)
    found = explain(log, "b", service=service)
    assert found.state == "ready"
    statement = next(s for s in found.statements if s.kind == "waiting")
    assert "capacity_concurrency" in statement.text and "a/1" in statement.text
    assert [type_at(log, p) for p in statement.positions] == [
        "core.work.submitted",  # (the input its definition carries)
        "core.execution.claimed",
    ]


def test_explain_held_by_budget_gate_and_crash_loop(log: EventStore, clock: ManualClock) -> None:
    service = service_on(log, crash_loop_limit=1)
    service.admission.configure_budgets([Budget(id="one-turn", unit="turns", max=1, per="work")])
    service.lifecycle.submit(
        SubmitWork(work_id="w", binding="b", kind="standing", inputs=(WorkInput(None, "1"),))
    )
    service.lifecycle.start_pass()
    execution, epoch = claimed(service, "w")
    service.lifecycle.invoke(execution, epoch)
    service.lifecycle.finish(execution, epoch, Result())
    service.lifecycle.accept("w", None, key="2")
    service.lifecycle.start_pass()
    budget = explain(log, "w", service=service)
    assert budget.state == "held"
    assert [type_at(log, p) for p in cited(budget, "held:budget")] == ["core.budget.held"]

    service.lifecycle.submit(SubmitWork(work_id="g", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.start_pass(
        gated=True, gates={"g": GateDecision("hold", "approver", "needs a human")}
    )
    gate = explain(log, "g", service=service)
    assert gate.state == "held"
    assert "only start gate approver" in next(
        s.text for s in gate.statements if s.kind == "held:gate"
    )
    assert [type_at(log, p) for p in cited(gate, "held:gate")] == ["core.gate.held"]

    service.admission.configure_budgets([])
    service.lifecycle.submit(SubmitWork(work_id="c", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.start_pass()
    for _ in range(2):
        clock.advance(61)
        service.recovery.recovery_pass()
    loop = explain(log, "c", service=service)
    assert loop.state == "held"
    assert [type_at(log, p) for p in cited(loop, "held:crash_loop")] == [
        "core.work.held",
        "core.execution.recovered",
    ]


def test_explain_retrying_failed_and_completed(log: EventStore) -> None:
    service = service_on(log)
    results = {
        "r": ("b", Result(outcome="failed", error_code="boom")),
        "p": ("b", Result(outcome="failed", error_code="bad_input", permanent=True)),
        "x": ("once", Result(outcome="failed", error_code="flaky")),
        "ok": ("b", Result()),
    }
    for work_id, (binding, _) in results.items():
        service.lifecycle.submit(
            SubmitWork(work_id=work_id, binding=binding, inputs=(WorkInput(None, "s"),))
        )
    service.lifecycle.start_pass()
    for work_id, (_, result) in results.items():
        execution, epoch = claimed(service, work_id)
        service.lifecycle.invoke(execution, epoch)
        service.lifecycle.finish(execution, epoch, result)

    retrying = explain(log, "r", service=service)
    assert retrying.state == "retry_wait"
    assert [type_at(log, p) for p in cited(retrying, "retrying")] == [
        "core.execution.failed",
        "core.retry.armed",
    ]
    permanent = explain(log, "p", service=service)
    assert permanent.state == "failed"
    statement = next(s for s in permanent.statements if s.kind == "failed")
    assert "permanently" in statement.text and "bad_input" in statement.text
    assert [type_at(log, p) for p in statement.positions] == ["core.execution.failed"]
    exhausted = explain(log, "x", service=service)
    assert exhausted.state == "failed"
    assert "exhausted" in next(s.text for s in exhausted.statements if s.kind == "failed")
    done = explain(log, "ok", service=service)
    assert done.state == "completed"
    assert [type_at(log, p) for p in cited(done, "completed")] == [
        "core.execution.completed",
        "core.execution.claimed",
    ]
    for found in (retrying, permanent, exhausted, done):
        attempt = cited(found, "attempt")
        assert type_at(log, attempt[0]) == "core.execution.claimed"


def test_explain_running_and_unknown_work(log: EventStore) -> None:
    service = service_on(log)
    service.lifecycle.submit(SubmitWork(work_id="a", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.start_pass()
    running = explain(log, "a", service=service)
    assert running.state == "running"
    assert type_at(log, cited(running, "running")[0]) == "core.execution.claimed"
    pinned = next(s for s in running.statements if s.kind == "pinned")
    assert service.generation in pinned.text and "this configuration" not in pinned.text
    service.set_binding(Binding(name="b2", executor="x"))  # a new configuration generation
    moved = next(s for s in explain(log, "a", service=service).statements if s.kind == "pinned")
    assert "unsupported_generation" in moved.text
    with pytest.raises(Exception, match="no Work 'nope'"):
        explain(log, "nope", service=service)


# -- the command line ---------------------------------------------------------------------


def rota(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", "--store", str(cwd / "rota.db"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("log", ["sqlite"], indirect=True)  # the CLI on its files
def test_cli_rebuild_verify_drift_at_and_explain(
    tmp_path: Path, log: SQLiteStore, clock: ManualClock
) -> None:
    service = service_on(log, concurrency=1)
    two_works(service)
    claim_time = format_timestamp(clock.now())
    log.close()

    missing = rota(tmp_path, "replay", "verify")
    assert missing.returncode == 1 and "no_projection_store" in missing.stderr

    built = rota(tmp_path, "replay", "rebuild", "--json")
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["projections"] == ["scheduler", "history"]
    ok = rota(tmp_path, "replay", "verify", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["ok"] is True

    tamper(tmp_path / "rota.db.projections", "scheduler", "work/a", '"scope":"root"', '"scope":"x"')
    drift = rota(tmp_path, "replay", "verify")
    assert drift.returncode == 1
    assert "scheduler: drift" in drift.stdout and "work/a" in drift.stdout
    drift_json = json.loads(rota(tmp_path, "replay", "verify", "--json").stdout)
    first = next(v for v in drift_json["projections"] if v["status"] == "drift")
    assert (first["name"], first["first_key"]) == ("scheduler", "work/a")
    repaired = rota(tmp_path, "replay", "rebuild", "--projection", "scheduler")
    assert repaired.returncode == 0, repaired.stderr
    assert rota(tmp_path, "replay", "verify").returncode == 0

    at_one = json.loads(rota(tmp_path, "replay", "at", "--position", "1", "--json").stdout)
    assert at_one["position"] == 1
    assert list(at_one["scheduler"]["works"]) == ["a"]
    at_time = rota(tmp_path, "replay", "at", "--time", claim_time, "--json")
    assert at_time.returncode == 0, at_time.stderr
    assert json.loads(at_time.stdout)["scheduler"]["works"]["a"]["state"] == "running"
    naive = rota(tmp_path, "replay", "at", "--time", "2026-07-01T00:00:00", "--json")
    assert naive.returncode == 2  # with --json, the refusal is JSON on stderr
    assert json.loads(naive.stderr)["error"]["code"] == "usage"

    text = rota(tmp_path, "explain", "a")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("a: running")
    as_json = json.loads(rota(tmp_path, "explain", "b", "--json").stdout)
    assert as_json["state"] == "ready"
    unknown = rota(tmp_path, "explain", "nope")
    assert unknown.returncode == 1 and unknown.stderr.startswith("rota: unknown_work: ")


def test_explain_a_ready_work_whose_interrupted_attempt_keeps_its_slot(log: EventStore) -> None:
    service = service_on(log)
    service.lifecycle.submit(SubmitWork(work_id="a", binding="b", inputs=(WorkInput(None, "s"),)))
    service.lifecycle.start_pass()
    execution, epoch = claimed(service, "a")
    service.lifecycle.invoke(execution, epoch)
    service.control.interrupt("a")
    found = explain(log, "a", service=service)
    assert found.state == "ready"
    statement = next(s for s in found.statements if s.kind == "waiting")
    assert "stop is not verified" in statement.text
    assert [type_at(log, p) for p in statement.positions] == [
        "core.work.submitted",  # (the input its definition carries)
        "core.execution.interrupted",
    ]
