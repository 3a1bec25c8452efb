"""`rota confirm-stopped WORK --by NAME`: an operator vouches that an ended attempt's
processes are gone, where no executor can verify the stop (its host is gone for good); the
slot is freed and the log says who vouched (evidence `operator: NAME`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import rota
from rota.infrastructure.clock import ManualClock

from .cli_process import refused
from .cli_process import rota as run_rota

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def _timed_out_attempt(path: Path) -> None:
    """A Work whose attempt timed out: ended, its slot held until a stop is confirmed."""
    clock = ManualClock(T0)
    with rota.open(path, clock=clock, owner="host-gone") as s:
        s.register("job", lambda ctx: None, timeout_seconds=30)
        s.submit("w", binding="job")
        lifecycle = s.service.lifecycle
        lifecycle.start_pass()
        lifecycle.invoke("w/1", 1)
        clock.advance(31)
        lifecycle.time_out("w/1", 1)
        view = s.work("w")
        assert view is not None and view.attempts[0].state == "ended"
        assert not view.attempts[0].stop_confirmed
        assert s.capacity()["pools"]["agents"]["in_use"] == 1


def test_an_operator_confirms_a_stop_no_executor_can_verify(tmp_path: Path) -> None:
    store = tmp_path / "rota.db"
    _timed_out_attempt(store)
    done = run_rota(tmp_path, "--store", str(store), "confirm-stopped", "w", "--by", "ada")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "w: attempt 1's stop confirmed by ada; its slot is free\n"
    again = run_rota(tmp_path, "--store", str(store), "confirm-stopped", "w", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["attempts"][0]["stop_confirmed"] is True
    with rota.open(store) as s:
        confirmed = [e for e in s.events() if e.type == "core.execution.stop_confirmed"]
        assert [e.data["evidence"] for e in confirmed] == ["operator: ada"]  # once
        assert s.capacity()["pools"]["agents"]["in_use"] == 0


def test_a_running_or_unknown_work_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "rota.db"
    with rota.open(store) as s:
        s.register("job", lambda ctx: None)
        s.submit("ready", binding="job")
    line = refused(run_rota(tmp_path, "--store", str(store), "confirm-stopped", "ready"),
                   "not_ended", 1)  # fmt: skip
    assert "has no attempt" in line
    refused(run_rota(tmp_path, "--store", str(store), "confirm-stopped", "nope"), "unknown_work", 1)
