"""The shell executor, driven with real processes: outcomes, capture, secrets, cancel, stop."""

from __future__ import annotations

import fcntl
import json
import os
import queue
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rota.application.errors import ExecutorError, InvalidExecutorConfig
from rota.application.ports import LaunchContext
from rota.domain.errors import LeaseLost
from rota.domain.results import Result
from rota.infrastructure.executors.shell import ShellExecutor
from rota.infrastructure.executors.shell_runs import read_tail

PHASES = {"launch_phases": ["executor"]}  # the binding declares the `executor` phase
WAIT = 10.0  # seconds: a bound for waits that normally end in milliseconds
EXECUTION = "w-1/2"
EPOCH = 7


@dataclass
class Launched:
    ctx: LaunchContext
    persisted: list[Any]
    phases: list[tuple[str, str | None]]
    results: queue.Queue[Result]

    def result(self) -> Result:
        return self.results.get(timeout=WAIT)

    @property
    def pgid(self) -> int:
        return int(self.persisted[0]["pgid"])


def make_context(config: Any, **fields: Any) -> tuple[LaunchContext, list[Any], list[Any]]:
    persisted: list[Any] = []
    phases: list[tuple[str, str | None]] = []
    inputs = fields.pop("inputs", [{"n": 1}])
    ctx = LaunchContext(
        work_id="w-1",
        attempt=2,
        epoch=EPOCH,
        inputs=inputs,
        input_positions=list(range(len(inputs))),
        config=config,
        deadline=datetime.now(UTC) + timedelta(seconds=fields.pop("deadline_in", 60.0)),
        persist=fields.pop("persist", persisted.append),
        record_phase=lambda name, outcome: phases.append((name, outcome)),
        **fields,
    )
    return ctx, persisted, phases


def start(executor: ShellExecutor, command: list[str], **fields: Any) -> Launched:
    config = {"command": command, **fields.pop("config", {})}
    ctx, persisted, phases = make_context(config, **fields)
    results: queue.Queue[Result] = queue.Queue()
    executor.launch(ctx, results.put)
    return Launched(ctx, persisted, phases, results)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def executor(runs: Path) -> Iterator[ShellExecutor]:
    shell = ShellExecutor(runs, kill_grace_seconds=2.0)
    yield shell
    shell.close()


def read_fifo(path: Path) -> str:
    """What a child writes into the FIFO at `path`; fails instead of hanging if it never does."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], WAIT)
        assert ready, "the child never wrote to the FIFO"
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


def stat_of(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    fields = stat_of(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [p for p in pids if (stat_of(p) or ["", ""])[1] == str(pid) and running(p)]


def assert_group_gone(pgid: int) -> None:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return
    # Only zombies may remain: orphans wait for an init that reaps them, and some sandboxes'
    # pid 1 never does. They run nothing.
    members = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    members = [pid for pid in members if (stat_of(pid) or ["", "", ""])[2] == str(pgid)]
    assert not [pid for pid in members if running(pid)]


# Outcomes


def test_exit_zero_completes_with_tails_minutes_and_recovery_metadata(
    executor: ShellExecutor,
) -> None:
    declared = {"launch_phases": ["executor"]}  # else no launch phase is recorded
    run = start(executor, ["sh", "-c", "echo out; echo err >&2"], config=declared)
    result = run.result()
    assert result.outcome == "completed" and result.error_code is None
    assert result.data == {"exit_code": 0, "stdout_tail": "out\n", "stderr_tail": "err\n"}
    assert 0 < result.usage["minutes"] < 1
    assert run.phases == [("executor", None), ("executor", "ok")]
    [metadata] = run.persisted
    assert metadata["pgid"] == metadata["pid"] and isinstance(metadata["started"], int)
    assert metadata["hold"] is True


# Isolation: the command is held back until its launch is pinned


def test_the_shell_executor_isolates() -> None:
    assert ShellExecutor.isolates is True


def test_nothing_of_the_command_runs_before_the_launch_is_pinned(
    executor: ShellExecutor, tmp_path: Path
) -> None:
    side = tmp_path / "ran"
    seen: list[tuple[bool, bool, list[int], bool]] = []

    def persist(metadata: Any) -> None:
        directory, pid = Path(metadata["run"]), metadata["pid"]
        seen.append((running(pid), (directory / "go").exists(), children(pid), side.exists()))

    run = start(executor, ["sh", "-c", 'echo ran > "$1"', "sh", str(side)], persist=persist)
    assert seen == [(True, False, [], False)]  # the wrapper waits and has started nothing
    assert run.result().outcome == "completed" and side.read_text() == "ran\n"


def test_a_refused_persist_never_lets_the_command_start(
    executor: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    side = tmp_path / "ran"
    seen: list[Any] = []

    def refuse(metadata: Any) -> None:
        seen.append(metadata)
        raise LeaseLost("the lease is gone")

    config = {"command": ["sh", "-c", 'echo ran > "$1"', "sh", str(side)], **PHASES}
    ctx, _, phases = make_context(config, persist=refuse)
    with pytest.raises(LeaseLost):
        ShellExecutor(runs).launch(ctx, lambda result: None)
    [metadata] = seen
    assert not running(metadata["pid"])  # the wrapper is gone: nothing can start it now
    assert not side.exists() and not Path(metadata["run"]).exists()
    assert phases == [("executor", None), ("executor", "failed")]


def test_a_wrapper_that_waited_too_long_gives_up_and_launch_raises(
    runs: Path, tmp_path: Path
) -> None:
    side = tmp_path / "ran"
    seen: list[Any] = []

    def slow(metadata: Any) -> None:  # the pin comes only after the wrapper gave up
        seen.append(metadata)
        wait_until((Path(metadata["run"]) / "abandoned").exists)

    shell = ShellExecutor(runs, hold_seconds=0.2)
    config = {"command": ["sh", "-c", 'echo ran > "$1"', "sh", str(side)], **PHASES}
    ctx, _, phases = make_context(config, persist=slow)
    with pytest.raises(ExecutorError, match="gave up waiting for the launch to be pinned"):
        shell.launch(ctx, lambda result: None)
    shell.close()
    [metadata] = seen
    assert not running(metadata["pid"]) and not side.exists()
    assert not Path(metadata["run"]).exists()
    assert phases == [("executor", None), ("executor", "failed")]


@pytest.mark.parametrize(
    ("script", "code", "message", "permanent"),
    [
        ("exit 3", "exit_3", "process exited with code 3", False),
        ("exit 78", "invalid_config", "process exited with code 78 (EX_CONFIG)", True),
        ("kill -KILL $$", "signal_9", "process was killed by signal 9", False),
    ],
)
def test_failures_map_the_exit_code(
    executor: ShellExecutor, script: str, code: str, message: str, permanent: bool
) -> None:
    result = start(executor, ["sh", "-c", f"echo before; {script}"]).result()
    assert result.outcome == "failed" and result.error_code == code
    assert result.error_message is not None and result.error_message.startswith(message)
    assert result.permanent is permanent
    assert result.data["stdout_tail"] == "before\n" and "minutes" in result.usage


def test_inputs_and_ids_reach_the_child_through_the_environment_and_stdin(
    executor: ShellExecutor,
) -> None:
    inputs = [{"n": 1, "text": "héllo 'quoted'"}, "two"]
    script = 'echo "$ROTA_WORK_ID $ROTA_EXECUTION_ID $ROTA_ATTEMPT $ROTA_EPOCH"; '
    script += 'printf "%s\\n" "$ROTA_INPUT"; cat'
    result = start(executor, ["sh", "-c", script], inputs=inputs).result()
    first, from_env, from_stdin = result.data["stdout_tail"].split("\n")
    assert first == "w-1 w-1/2 2 7"
    assert from_env == from_stdin == msgspec.json.encode(inputs).decode()


def test_large_inputs_come_on_stdin_only(executor: ShellExecutor) -> None:
    inputs = ["x" * 200_000]  # more than a pipe buffer and than one environment string holds
    script = 'echo "${ROTA_INPUT:-unset}"; wc -c; ls "$(dirname "$(readlink /proc/$$/fd/0)")"'
    run = start(executor, ["sh", "-c", script], inputs=inputs)
    unset, size, *names = run.result().data["stdout_tail"].split()
    assert (unset, size) == ("unset", "200004") and "input.json" in names  # a file


@pytest.mark.parametrize("size", [0, 4000])
def test_a_small_input_comes_through_a_pipe_that_holds_it_whole(
    executor: ShellExecutor, size: int
) -> None:
    inputs = ["x" * size] if size else []
    script = "readlink /proc/$$/fd/0; cat"  # filled and closed before the wrapper began
    run = start(executor, ["sh", "-c", script], inputs=inputs)
    stdin, data = run.result().data["stdout_tail"].split("\n", 1)
    assert stdin.startswith("pipe:") and data == msgspec.json.encode(inputs).decode()


def test_the_environment_is_minimal_and_merged_in_order(
    executor: ShellExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROTA_TEST_LEAK", "leak")
    environment = {"GREETING": "hi", "SHARED": "config", "ROTA_EPOCH": "99"}
    run = start(
        executor, ["env"], config={"environment": environment}, env={"SHARED": "ctx", "RUN": "qa"}
    )
    seen = dict(line.split("=", 1) for line in run.result().data["stdout_tail"].splitlines())
    inherited = {key for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in os.environ}
    rota = {"ROTA_WORK_ID", "ROTA_EXECUTION_ID", "ROTA_ATTEMPT", "ROTA_EPOCH", "ROTA_INPUT"}
    assert set(seen) == inherited | rota | {"GREETING", "SHARED", "RUN"}
    picked = [seen[key] for key in ("GREETING", "SHARED", "RUN", "ROTA_EPOCH")]
    assert picked == ["hi", "ctx", "qa", "7"]  # ctx.env over config; rota's own ids last


@pytest.mark.parametrize(
    ("last_line", "error"),
    [
        ("true", None),
        ('printf \'{"rota.result": {"turn": {"status": "Bad %s"}}}\\n\' "$SECRET"', "turn status"),
        ('printf \'{"rota.result": {"data": {"leak": "%s"}}}\\n\' "$SECRET"', "ctx.env"),
    ],
)
def test_secrets_reach_the_child_but_never_the_result(
    executor: ShellExecutor, last_line: str, error: str | None
) -> None:
    canary = f"canary-{secrets.token_hex(16)}"
    script = f'echo "token=$SECRET"; echo "$SECRET" >&2; {last_line}'
    run = start(executor, ["sh", "-c", script], env={"SECRET": canary})
    result = run.result()
    assert canary.encode() not in msgspec.json.encode(result)
    assert canary not in repr((run.persisted, run.phases))
    assert result.data["stdout_tail"].startswith("token=[redacted]\n")  # it did arrive
    assert result.data["stderr_tail"] == "[redacted]\n"
    if error is None:
        assert result.outcome == "completed"
    else:
        assert result.error_code == "invalid_result" and error in (result.error_message or "")


# Bounded capture


def test_output_beyond_the_capture_keeps_only_the_tail() -> None:
    shell = ShellExecutor(capture_bytes=1024)
    try:
        code = "import sys; [s.write(c * 5_000_000 + 'END\\n') for s, c in "
        code += "((sys.stdout, 'x'), (sys.stderr, 'y'))]"
        result = start(shell, [sys.executable, "-c", code]).result()
    finally:
        shell.close()
    for key, filler in (("stdout_tail", "x"), ("stderr_tail", "y")):
        tail = result.data[key]
        assert len(tail) == 1024 and tail.endswith("END\n") and set(tail[:-4]) == {filler}


def test_tails_hold_at_most_4096_characters(executor: ShellExecutor) -> None:
    result = start(executor, [sys.executable, "-c", "print('a' * 9999 + 'b')"]).result()
    assert len(result.data["stdout_tail"]) == 4096
    assert result.data["stdout_tail"].endswith("ab\n")


def test_only_the_tail_of_an_output_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    path.write_bytes(b"x" * 5_000_000 + b"a" * 5000 + b"end")
    assert read_tail(path, 1000) == b"a" * 997 + b"end"
    assert read_tail(path, 10_000_000) == path.read_bytes()
    assert read_tail(tmp_path / "missing", 1000) == b""


# The rota.result line


def result_line(declared: Any) -> str:
    return msgspec.json.encode({"rota.result": declared}).decode()


def test_the_result_line_sets_outcome_data_and_turn(executor: ShellExecutor) -> None:
    line = result_line(
        {
            "outcome": "waiting",
            "data": {"pr": 12},
            "turn": {"status": "needs_review", "comment": "see the PR"},
        }
    )
    script = ["sh", "-c", 'echo working; printf "%s\\n" "$1"', "sh", line]
    result = start(executor, script).result()
    assert result.outcome == "waiting" and result.error_code is None
    assert result.data["result"] == {"pr": 12}
    assert result.data["core.turn.v1"] == {"status": "needs_review", "comment": "see the PR"}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"turn": {"status": "Not Valid!"}}, "turn status 'Not Valid!' must match"),
        ({"turn": "done"}, "must be an object with a string status"),
        ({"outcome": "done"}, "outcome must be one of"),
        ({"permanent": True}, "permanent and retry hints only apply to a failed result"),
        ({"permanent": "yes", "outcome": "failed"}, "must be booleans"),
        ({"colour": "red"}, "unknown fields ['colour']"),
        ("completed", "rota.result must be an object"),
        ({"data": {"blob": "z" * 300_000}}, "result data is"),
        ({"usage": [1, 2]}, "usage must be an object of amounts by unit"),
        ({"usage": {"USD": 1}}, "usage unit 'USD' must match"),
        ({"usage": {"turns": 1}}, "usage unit 'turns' is reserved"),
        ({"usage": {"attempts": 1}}, "usage unit 'attempts' is reserved"),
        ({"usage": {"minutes": 3}}, "measures a run's wall-clock minutes itself"),
        ({"usage": {"usd": -0.5}}, "usage 'usd' must be finite and non-negative"),
        ({"usage": {"usd": "0.5"}}, "usage 'usd' must be a number"),
        ({"usage": {"usd": True}}, "usage 'usd' must be a number"),
    ],
)
def test_an_unsound_result_line_is_reported_as_invalid_result(declared: Any, message: str) -> None:
    shell = ShellExecutor(capture_bytes=512 * 1024)
    echo = "import json, sys; print(json.load(sys.stdin)[0])"  # the line comes as the input
    try:
        result = start(shell, [sys.executable, "-c", echo], inputs=[result_line(declared)]).result()
    finally:
        shell.close()
    assert (result.outcome, result.error_code) == ("failed", "invalid_result")
    assert result.error_message is not None and message in result.error_message
    assert result.data["exit_code"] == 0 and "result" not in result.data
    assert list(result.usage) == ["minutes"]  # nothing the line declared is charged


def test_the_result_line_reports_usage_units_beside_the_minutes(executor: ShellExecutor) -> None:
    line = result_line({"usage": {"usd": 0.42, "tokens": 1800}})
    result = start(executor, ["sh", "-c", 'printf "%s\\n" "$1"', "sh", line]).result()
    assert result.outcome == "completed"
    assert set(result.usage) == {"minutes", "usd", "tokens"}
    assert (result.usage["usd"], result.usage["tokens"]) == (0.42, 1800)
    assert 0 <= result.usage["minutes"] < 1
    failed = start(executor, ["sh", "-c", 'printf "%s\\n" "$1"; exit 3', "sh", line]).result()
    assert failed.error_code == "exit_3" and failed.usage["usd"] == 0.42  # a failure cost too


def test_a_non_zero_exit_fails_whatever_the_line_says(executor: ShellExecutor) -> None:
    line = result_line({"outcome": "completed", "permanent": True, "data": {"step": 3}})
    result = start(executor, ["sh", "-c", 'printf "%s\\n" "$1"; exit 4', "sh", line]).result()
    assert (result.outcome, result.error_code, result.permanent) == ("failed", "exit_4", True)
    assert result.data["result"] == {"step": 3}


def test_exit_zero_may_report_failure(executor: ShellExecutor) -> None:
    line = result_line({"outcome": "failed", "retry_unknown": True})
    result = start(executor, ["sh", "-c", 'printf "%s\\n" "$1"', "sh", line]).result()
    assert (result.outcome, result.error_code) == ("failed", "reported_failure")
    assert result.retry_unknown and not result.permanent


# Cancellation, deadline, leftovers


@pytest.mark.parametrize(
    ("reason", "message"),
    [(None, "cancelled"), (LeaseLost("epoch 7 is stale: do-not-store"), "lease lost")],
)
def test_cancel_kills_the_whole_process_group(
    executor: ShellExecutor, tmp_path: Path, reason: BaseException | None, message: str
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    run = start(executor, ["sh", "-c", 'sleep 30 & echo $! > "$1"; sleep 30', "sh", str(fifo)])
    grandchild = int(read_fifo(fifo))
    assert running(grandchild)
    run.ctx.cancel_reason = reason
    run.ctx.cancel.set()
    result = run.result()
    assert (result.outcome, result.error_code) == ("failed", "cancelled")
    assert result.error_message == message
    assert b"do-not-store" not in msgspec.json.encode(result)
    assert not running(grandchild)
    assert_group_gone(run.pgid)


def test_a_passed_deadline_times_out(executor: ShellExecutor) -> None:
    run = start(executor, ["sleep", "30"], deadline_in=0.5)
    launched = datetime.now(UTC)  # the minutes count from the launch's end, the deadline
    left = (run.ctx.deadline - launched).total_seconds()  # from the context's making
    result = run.result()
    assert (result.outcome, result.error_code) == ("failed", "timed_out")
    # Stopped at its deadline, not before (a slow launch on a loaded machine takes its
    # share of the 0.5 s; the run still gets every bit of what was left).
    assert (left - 0.1) / 60 < result.usage["minutes"] < WAIT / 60
    assert_group_gone(run.pgid)


def test_what_a_finished_command_leaves_in_its_group_is_stopped(executor: ShellExecutor) -> None:
    result = start(executor, ["sh", "-c", "sleep 30 & echo $!"]).result()
    assert result.outcome == "completed"
    assert not running(int(result.data["stdout_tail"]))


def test_a_refused_persist_kills_the_process_and_launch_raises(executor: ShellExecutor) -> None:
    seen: list[Any] = []

    def refuse(metadata: Any) -> None:
        seen.append(metadata)
        raise LeaseLost("the lease is gone")

    ctx, _, _ = make_context({"command": ["sh", "-c", "sleep 30 & sleep 30"]}, persist=refuse)
    results: queue.Queue[Result] = queue.Queue()
    with pytest.raises(LeaseLost):
        executor.launch(ctx, results.put)
    [metadata] = seen
    assert not running(metadata["pid"])
    assert_group_gone(metadata["pgid"])
    assert results.empty()


def test_close_stops_what_still_runs() -> None:
    shell = ShellExecutor(kill_grace_seconds=2.0)
    run = start(shell, ["sleep", "30"])
    shell.close()
    assert run.result().error_code == "cancelled"
    assert_group_gone(run.pgid)
    with pytest.raises(ExecutorError, match="closed"):
        start(shell, ["true"])


# Config errors


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"command": "echo hi"}, r'config\.command: must be a list of strings.*\["sh", "-c"'),
        ({}, r"config\.command: must be a list of strings"),
        ({"command": []}, r"config\.command: must be a list of strings"),
        ({"command": ["echo", 3]}, r"config\.command: must be a list of strings"),
        ({"command": ["true"], "cwd": 5}, r"config\.cwd: "),
        ({"command": ["true"], "cwd": "/nonexistent/rota"}, r"config\.cwd: must name an exist"),
        ({"command": ["true"], "environment": {"A": 1}}, r"config\.environment: "),
        ({"command": ["true"], "environment": ["A=1"]}, r"config\.environment: "),
        ({"command": ["true"], "enviroment": {}}, r"config\.enviroment: unknown key; allowed"),
        ({"command": ["true"], "b": 1, "a": 2}, r"config\.a: unknown key \(also unknown: \['b'\]"),
        (["true"], r"config: must be an object"),
        ({"command": ["true"], "launch_phases": ["toolbelt"]}, r"config\.launch_phases: "),
        ({"command": ["true"], "launch_phases": "executor"}, r"config\.launch_phases: "),
    ],
)
def test_config_errors_name_the_field_before_anything_starts(
    executor: ShellExecutor, config: Any, message: str
) -> None:
    ctx, persisted, phases = make_context(config)
    with pytest.raises(InvalidExecutorConfig, match=message):
        executor.launch(ctx, lambda result: None)
    assert persisted == [] and phases == []
    if "/nonexistent/rota" not in str(config):  # whether a directory exists is launch's
        with pytest.raises(InvalidExecutorConfig, match=message):
            ShellExecutor.validate_config(config)


def test_a_binding_that_declares_no_launch_phase_records_none(executor: ShellExecutor) -> None:
    run = start(executor, ["true"])
    assert run.result().outcome == "completed"
    assert run.phases == [] and len(run.persisted) == 1  # one fenced write: the pin


def test_validate_config_accepts_a_sound_config_without_looking_at_the_machine() -> None:
    ShellExecutor.validate_config({"command": ["true"], "launch_phases": ["executor"]})
    ShellExecutor.validate_config({"command": ["true"], "launch_phases": []})
    ShellExecutor.validate_config({"command": ["true"], "cwd": "/nonexistent/rota"})
    ShellExecutor.validate_config({"command": ["sh", "-c", "x"], "environment": {"A": "1"}})


def test_a_missing_program_fails_the_executor_phase(executor: ShellExecutor) -> None:
    ctx, persisted, phases = make_context({"command": ["/nonexistent/rota-program"], **PHASES})
    with pytest.raises(ExecutorError, match=r"could not start.*No such file or directory"):
        executor.launch(ctx, lambda result: None)
    assert phases == [("executor", None), ("executor", "failed")]
    [metadata] = persisted  # pinned first: the wrapper learns only then that it cannot start
    assert not running(metadata["pid"]) and not Path(metadata["run"]).exists()


# Stop evidence and interrupt


def test_stop_after_the_process_finished_is_stopped(executor: ShellExecutor) -> None:
    run = start(executor, ["true"])
    run.result()
    assert executor.stop(EXECUTION, EPOCH, run.persisted[0]) == "stopped"


@pytest.mark.parametrize("restarted", [False, True])
def test_stop_kills_a_running_group_from_its_metadata(
    executor: ShellExecutor, tmp_path: Path, restarted: bool
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    run = start(executor, ["sh", "-c", 'sleep 30 & echo $! > "$1"; sleep 30', "sh", str(fifo)])
    grandchild = int(read_fifo(fifo))
    # A long grace: under load the group (its wrapper reaped by the first executor's
    # spawner) may take more than 2 s to vanish, and escalating to SIGKILL is not what this
    # test is about.
    stopper = ShellExecutor(kill_grace_seconds=15.0) if restarted else executor
    assert stopper.stop(EXECUTION, EPOCH, run.persisted[0]) == "stopped"
    assert not running(grandchild)
    assert_group_gone(run.pgid)
    assert run.result().error_code == "signal_15"


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        {},
        "12",
        {"pid": "12", "pgid": 12, "started": 1},
        {"pid": True, "pgid": True, "started": None},
        {"pid": 0, "pgid": 0, "started": None},
        {"pid": os.getpid(), "pgid": os.getpgrp(), "started": 1},  # our own group: never
    ],
)
def test_stop_without_usable_metadata_is_unknown(executor: ShellExecutor, metadata: Any) -> None:
    assert executor.stop(EXECUTION, EPOCH, metadata) == "unknown"


def test_a_reused_pid_is_never_signalled() -> None:
    shell = ShellExecutor(kill_grace_seconds=2.0)
    sleeper = subprocess.Popen(["sleep", "30"])
    leader = subprocess.Popen(["sleep", "30"], start_new_session=True)
    empty = subprocess.Popen(["true"], start_new_session=True)
    empty.wait()  # its group is now empty
    try:
        reused = {"pid": sleeper.pid, "pgid": empty.pid, "started": 1}
        assert shell.stop(EXECUTION, EPOCH, reused) == "stopped"
        live_group = {"pid": leader.pid, "pgid": leader.pid, "started": 1}
        assert shell.stop(EXECUTION, EPOCH, live_group) == "unknown"
        unverifiable = {"pid": leader.pid, "pgid": leader.pid, "started": None}
        assert shell.stop(EXECUTION, EPOCH, unverifiable) == "unknown"
        assert sleeper.poll() is None and leader.poll() is None
    finally:
        for process in (sleeper, leader):
            process.kill()
            process.wait()


def test_stop_clears_what_a_vanished_leader_left_in_its_group() -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 30 & echo $!"], start_new_session=True, stdout=subprocess.PIPE
    )
    assert leader.stdout is not None
    leftover = int(leader.stdout.readline())
    leader.wait(WAIT)
    leader.stdout.close()
    metadata = {"pid": leader.pid, "pgid": leader.pid, "started": 1}
    assert ShellExecutor(kill_grace_seconds=2.0).stop(EXECUTION, EPOCH, metadata) == "stopped"
    assert not running(leftover)
    assert_group_gone(leader.pid)


def test_interrupt_delivers_sigterm_to_the_running_group(
    executor: ShellExecutor, tmp_path: Path
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    script = 'trap "echo got-term; exit 7" TERM; echo ready > "$1"; sleep 30 & wait'
    run = start(executor, ["sh", "-c", script, "sh", str(fifo)])
    read_fifo(fifo)
    assert executor.interrupt(EXECUTION, EPOCH - 1) is False
    assert executor.interrupt("w-9/1", EPOCH) is False
    assert executor.interrupt(EXECUTION, EPOCH) is True
    result = run.result()
    assert (result.error_code, result.data["stdout_tail"]) == ("exit_7", "got-term\n")
    assert executor.interrupt(EXECUTION, EPOCH) is False


# Run directories


def test_each_launch_gets_a_private_run_directory_that_goes_once_reported(
    executor: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    argv = 'import sys; print(sys.argv[1:]); open(sys.argv[1], "w").write("x"); sys.stdin.read()'
    run = start(executor, [sys.executable, "-c", argv, str(fifo), "two words"])
    read_fifo(fifo)
    [metadata] = run.persisted
    directory = Path(metadata["run"])
    assert directory.parent == runs and directory.name.startswith("w-1_2-e7-")
    assert len(directory.name.rsplit("-", 1)[1]) == 8 and directory.is_absolute()
    assert oct(runs.stat().st_mode & 0o777) == oct(directory.stat().st_mode & 0o777) == "0o700"
    assert {p.name for p in directory.iterdir()} >= {"stdout", "stderr", "go"}
    assert not (directory / "input.json").exists()  # a small input comes through a pipe
    assert len(msgspec.json.encode(metadata)) < 1024
    result = run.result()
    assert result.data["stdout_tail"] == f"[{str(fifo)!r}, 'two words']\n"  # argv unchanged
    executor.close()
    assert directory.exists()  # kept until the host says the outcome is in the log
    executor.forget("w-1/2", 7)
    assert not directory.exists()


def test_the_default_runs_dir_is_private_and_a_shared_one_is_refused(tmp_path: Path) -> None:
    shell = ShellExecutor()
    assert shell.runs_dir == Path(tempfile.gettempdir()) / f"rota-runs-{os.getuid()}"
    assert start(shell, ["true"]).result().outcome == "completed"
    shell.close()
    assert shell.runs_dir.stat().st_mode & 0o077 == 0
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    ctx, persisted, _ = make_context({"command": ["true"]})
    with pytest.raises(ExecutorError, match="must not be writable by others"):
        ShellExecutor(shared).launch(ctx, lambda result: None)
    assert persisted == []


def test_the_wrapper_leaves_the_environment_as_it_is(
    executor: ShellExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANG", raising=False)  # a C locale: Python would add LC_CTYPE
    seen = start(executor, ["env"]).result().data["stdout_tail"]
    assert "LC_CTYPE" not in seen and "LANG=" not in seen and "ROTA_EPOCH=7" in seen


# Recovery: the launching daemon dies (SIGKILL); a new executor adopts what it left

DAEMON = """
import json, sys, threading
from datetime import UTC, datetime, timedelta
from rota.application.ports import LaunchContext
from rota.infrastructure.executors.shell import ShellExecutor

pinned = []

def persist(metadata):
    pinned.append(metadata)
    if sys.argv[3] == "unpinned":  # the daemon dies while it persists: no `go` ever
        print(json.dumps(metadata), flush=True)
        threading.Event().wait()

shell = ShellExecutor(sys.argv[1])
ctx = LaunchContext(
    work_id="w-1", attempt=2, epoch=7, inputs=[], input_positions=[],
    config={"command": json.loads(sys.argv[2])},
    deadline=datetime.now(UTC) + timedelta(minutes=5), persist=persist,
)
shell.launch(ctx, lambda result: None)
print(json.dumps(pinned[0]), flush=True)  # launched: pinned and let go
sys.stdin.read()  # until the test kills this daemon
"""


def launch_and_kill_the_daemon(
    runs: Path, command: list[str], pinned: bool = True
) -> dict[str, Any]:
    """Launch `command` from another process, SIGKILL that process once `launch` returned (or,
    not `pinned`, while it persists the metadata), return the metadata."""
    mode = "pinned" if pinned else "unpinned"
    daemon = subprocess.Popen(
        [sys.executable, "-P", "-c", DAEMON, str(runs), json.dumps(command), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert daemon.stdin is not None and daemon.stdout is not None
    try:
        ready, _, _ = select.select([daemon.stdout], [], [], WAIT)
        assert ready, "the daemon never persisted recovery metadata"
        metadata: dict[str, Any] = json.loads(daemon.stdout.readline())
        if not pinned:  # the wrapper holds the command back
            assert running(metadata["pid"]) and children(metadata["pid"]) == []
    finally:
        daemon.kill()
        daemon.wait(WAIT)
        daemon.stdin.close()
        daemon.stdout.close()
    if pinned:
        assert running(metadata["pid"])  # the group outlived its daemon
    return metadata


def gated(gate: Path, script: str) -> list[str]:
    """A command that waits for the test to create `gate`, then runs `script`."""
    return ["sh", "-c", f'while [ ! -e "$1" ]; do sleep 0.01; done; {script}', "sh", str(gate)]


PRINTER = "for i in $(seq 1 2000); do echo $i; done"


def wait_until(condition: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def group_gone(pgid: int) -> bool:
    try:
        assert_group_gone(pgid)
    except AssertionError:
        return False
    return True


def recovering(**fields: Any) -> tuple[LaunchContext, queue.Queue[Result]]:
    ctx, _, _ = make_context({"command": ["unused"]}, **fields)
    ctx.epoch = EPOCH + 1
    return ctx, queue.Queue()


@pytest.fixture
def adopter(runs: Path) -> Iterator[ShellExecutor]:
    shell = ShellExecutor(runs, kill_grace_seconds=2.0)
    yield shell
    shell.close()


def test_output_after_the_daemon_died_cannot_kill_the_command(runs: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    metadata = launch_and_kill_the_daemon(runs, gated(gate, PRINTER))
    gate.touch()  # only now, with its daemon dead, does it print
    status = Path(metadata["run"]) / "status"
    wait_until(status.exists)
    assert status.read_text() == "0\n"  # no SIGPIPE: it printed everything and exited 0
    assert (status.parent / "stdout").read_text().split() == [str(i) for i in range(1, 2001)]


@pytest.mark.parametrize("code", [0, 3])
def test_a_running_orphan_is_adopted_and_reports_its_real_exit(
    adopter: ShellExecutor, runs: Path, tmp_path: Path, code: int
) -> None:
    gate = tmp_path / "gate"
    metadata = launch_and_kill_the_daemon(runs, gated(gate, f"{PRINTER}; exit {code}"))
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == "attached"
    gate.touch()
    result = results.get(timeout=WAIT)
    expected = ("completed", None) if code == 0 else ("failed", "exit_3")
    assert (result.outcome, result.error_code) == expected
    assert result.data["exit_code"] == code
    assert result.data["stdout_tail"].endswith("1999\n2000\n")
    assert 0 < result.usage["minutes"] < 1
    adopter.close()
    assert Path(metadata["run"]).exists()  # until the outcome is in the log
    adopter.forget(EXECUTION, EPOCH)
    assert not Path(metadata["run"]).exists()
    assert_group_gone(metadata["pgid"])


def test_a_run_that_finished_while_nobody_watched_is_reported_at_once(
    adopter: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    metadata = launch_and_kill_the_daemon(runs, gated(gate, "echo finished; exit 5"))
    gate.touch()
    wait_until((Path(metadata["run"]) / "status").exists)
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == "attached"
    result = results.get(timeout=WAIT)
    assert (result.error_code, result.data["stdout_tail"]) == ("exit_5", "finished\n")
    assert results.empty()


def test_a_run_killed_without_status_is_stopped(
    adopter: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    metadata = launch_and_kill_the_daemon(runs, gated(tmp_path / "gate", "true"))
    os.killpg(metadata["pgid"], signal.SIGKILL)
    wait_until(lambda: group_gone(metadata["pgid"]))
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == "stopped"
    assert results.empty() and not Path(metadata["run"]).exists()


def test_an_adopted_run_is_cancelled_interrupted_or_timed_out_like_a_launched_one(
    adopter: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    # The command says when its trap is set: a SIGTERM before that kills the shell outright
    # (signal_15), which is not what this test is about.
    script = 'trap "echo got-term; exit 7" TERM; : > "$1"; sleep 30 & wait'
    for action, expected in (("cancel", "cancelled"), ("interrupt", "exit_7"), ("deadline", "")):
        trapped = tmp_path / f"trapped-{action}"
        metadata = launch_and_kill_the_daemon(runs, ["sh", "-c", script, "sh", str(trapped)])
        wait_until(trapped.exists)
        ctx, results = recovering(deadline_in=0.3 if action == "deadline" else 60)
        assert adopter.recover(ctx, metadata, results.put) == "attached"
        if action == "cancel":
            ctx.cancel.set()
        elif action == "interrupt":
            assert adopter.interrupt(EXECUTION, EPOCH) is False  # the dead owner's epoch
            assert adopter.interrupt(EXECUTION, EPOCH + 1) is True
        result = results.get(timeout=WAIT)
        assert result.error_code == (expected or "timed_out")
        wait_until(lambda: group_gone(metadata["pgid"]))  # noqa: B023
        adopter.forget(EXECUTION, EPOCH)  # the host, once the outcome is in the log
        wait_until(lambda: not Path(metadata["run"]).exists())  # noqa: B023 (the cleaner's)


def test_close_stops_watching_an_adopted_run_without_stopping_it(
    adopter: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    metadata = launch_and_kill_the_daemon(runs, ["sleep", "30"])
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == "attached"
    adopter.close()
    assert running(metadata["pid"]) and results.empty()
    assert adopter.recover(ctx, metadata, results.put) == "unknown"  # closed
    later = ShellExecutor(runs, kill_grace_seconds=2.0)
    assert later.stop(EXECUTION, EPOCH, metadata) == "stopped"
    assert_group_gone(metadata["pgid"])
    assert not Path(metadata["run"]).exists()


def test_a_wrapper_whose_daemon_dies_before_the_pin_never_starts_the_command(
    adopter: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    side = tmp_path / "ran"
    command = ["sh", "-c", 'echo ran > "$1"', "sh", str(side)]
    metadata = launch_and_kill_the_daemon(runs, command, pinned=False)
    directory = Path(metadata["run"])
    wait_until(lambda: not running(metadata["pid"]))  # it notices and exits at once
    assert not side.exists()  # and nothing else could start the command
    assert (directory / "abandoned").exists()
    assert not (directory / "go").exists() and not (directory / "status").exists()
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == "not_started"  # relaunch it
    assert results.empty() and not directory.exists()


LAUNCHER = """
import os, sys
from rota.infrastructure.executors.shell_spawner import Spawner
run, report, wake, argv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
null = os.open(os.devnull, os.O_RDWR)
spawner = Spawner()  # kept: its socket closing would end the spawner
spawner.spawn(run, (null, null, null, report, wake), 30.0, argv, dict(os.environ), None)
sys.stdin.read()  # until the test kills this launcher
"""


def test_a_waiting_wrapper_notices_its_launcher_died_by_its_parent_pid(
    runs: Path, tmp_path: Path
) -> None:
    """The wake pipe stays open elsewhere (here: in the test), so only the parent pid tells:
    the launcher's spawner exits with it, and the wrapper it forked is orphaned."""
    side, directory = tmp_path / "ran", runs / "w-1_2-e7-0123abcd"
    directory.mkdir(parents=True)
    report, writer = os.pipe()
    listener, wake = os.pipe()
    argv = [str(directory), str(writer), str(listener), "sh", "-c", 'echo ran > "$1"', "sh"]
    launcher = subprocess.Popen(
        [sys.executable, "-P", "-c", LAUNCHER, *argv, str(side)],
        stdin=subprocess.PIPE, pass_fds=(writer, listener),
    )  # fmt: skip
    os.close(writer)
    os.close(listener)
    try:
        assert select.select([report], [], [], WAIT)[0]
        assert os.read(report, 64).startswith(b"h")  # b"h<pid> <start>" (a pipe: no pidfd)
        [spawner] = children(launcher.pid)  # the launcher's spawner forked the wrapper
        [pid] = children(spawner)
        assert children(pid) == []  # it holds the command back
    finally:
        launcher.kill()
        launcher.wait(WAIT)
        assert launcher.stdin is not None
        launcher.stdin.close()
    try:
        wait_until(lambda: not running(pid))
        assert os.read(report, 64) == b""  # it said nothing more: it started nothing
    finally:
        os.close(report)
        os.close(wake)
    assert not side.exists() and (directory / "abandoned").exists()
    assert not (directory / "status").exists()


def test_recovery_within_the_same_executor_hands_the_run_to_the_new_callback(
    executor: ShellExecutor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    run = start(executor, gated(gate, "echo done"))
    ctx, results = recovering()
    assert executor.recover(ctx, run.persisted[0], results.put) == "attached"
    gate.touch()
    assert results.get(timeout=WAIT).data["stdout_tail"] == "done\n"
    executor.close()
    assert run.results.empty()  # the old epoch's callback is never called


def fake_run(runs: Path, status: str | None, **where: Any) -> dict[str, Any]:
    directory = runs / "w-1_2-e7-0123abcd"
    directory.mkdir(parents=True)
    for name, text in (
        ("input.json", "[]"),
        ("stdout", "out\n"),
        ("stderr", ""),
        ("status", status),
    ):
        if text is not None:
            (directory / name).write_text(text)
    return {"pid": 2**22 + 7, "pgid": 2**22 + 7, "started": 1, "run": str(directory), **where}


@pytest.mark.parametrize(
    ("status", "where", "answer"),
    [
        ("0\n", {"boot": "an-earlier-boot"}, "attached"),
        (None, {"boot": "an-earlier-boot"}, "stopped"),
        ("0\n", {"host": "another-host"}, "unknown"),
        ("0\n", {"pidns": 1}, "attached"),  # a restarted container: its wrapper is gone
        (None, {"pidns": 1}, "stopped"),
        ("-9\n", {}, "attached"),
        (None, {}, "stopped"),
    ],
)
def test_recovery_from_metadata_alone(
    adopter: ShellExecutor, runs: Path, status: str | None, where: Any, answer: str
) -> None:
    metadata = fake_run(runs, status, **where)
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == answer
    if answer == "attached":
        result = results.get(timeout=WAIT)
        assert result.data["stdout_tail"] == "out\n"
        assert result.error_code == (None if status == "0\n" else "signal_9")
        adopter.close()
    # Kept while unknown, and after a reported result until the host calls `forget`.
    assert Path(metadata["run"]).exists() is (answer in ("unknown", "attached"))


@pytest.mark.parametrize(
    ("files", "locked", "answer"),
    [
        ((), False, "not_started"),  # its wrapper is gone and `go` never came
        (("abandoned",), True, "not_started"),  # it gave up: a final decision
        (("abandoned", "go"), False, "not_started"),  # `go` came too late
        ((), True, "unknown"),  # its wrapper still waits for `go`
        (("go", "status"), False, "attached"),  # let go: as any other run
    ],
)
def test_recovery_of_a_run_that_waits_for_go(
    adopter: ShellExecutor, runs: Path, files: tuple[str, ...], locked: bool, answer: str
) -> None:
    metadata = {**fake_run(runs, None), "hold": True}
    directory = Path(metadata["run"])
    for name in files:
        (directory / name).write_text("0\n")
    lock = os.open(directory, os.O_RDONLY)  # as the waiting wrapper holds it
    try:
        if locked:
            fcntl.flock(lock, fcntl.LOCK_EX)
        ctx, results = recovering()
        assert adopter.recover(ctx, metadata, results.put) == answer
    finally:
        os.close(lock)
    if answer == "attached":
        assert results.get(timeout=WAIT).outcome == "completed"
        adopter.close()
    else:
        assert results.empty()
    assert directory.exists() is (answer in ("unknown", "attached"))


@pytest.mark.parametrize(
    "metadata",
    [None, {}, {"pid": 12, "pgid": 13, "started": 1, "run": "/tmp/w-1_2-e7-00000000"}],
)
def test_recovery_without_usable_metadata_is_unknown(adopter: ShellExecutor, metadata: Any) -> None:
    ctx, results = recovering()
    assert adopter.recover(ctx, metadata, results.put) == "unknown"
    assert results.empty()


def test_an_older_launch_without_a_run_directory_is_stopped_once_its_group_is_gone(
    adopter: ShellExecutor,
) -> None:
    leader = subprocess.Popen(["sleep", "30"], start_new_session=True)
    stat = stat_of(leader.pid)
    assert stat is not None
    metadata = {"pid": leader.pid, "pgid": leader.pid, "started": int(stat[19])}
    ctx, results = recovering()
    try:
        assert adopter.recover(ctx, metadata, results.put) == "unknown"  # it cannot report
    finally:
        leader.kill()
        leader.wait()
    assert adopter.recover(ctx, metadata, results.put) == "stopped"
    assert results.empty()


def test_a_wrapper_of_another_pid_namespace_is_seen_through_its_lock(
    adopter: ShellExecutor, runs: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    metadata = launch_and_kill_the_daemon(runs, gated(gate, "echo late"))
    elsewhere = {**metadata, "pidns": 1}  # its pid means nothing there: only the lock tells
    ctx, results = recovering()
    assert adopter.recover(ctx, elsewhere, results.put) == "unknown"
    assert adopter.stop(EXECUTION, EPOCH, elsewhere) == "unknown"
    gate.touch()
    wait_until(lambda: group_gone(metadata["pgid"]))
    assert adopter.recover(ctx, elsewhere, results.put) == "attached"
    assert results.get(timeout=WAIT).data["stdout_tail"] == "late\n"


# -- the reaper (issue 18 item 6): one thread watches the pidfds of launched runs -------


def test_runs_that_end_are_reported_by_the_reaper_without_a_thread_each(tmp_path: Path) -> None:
    executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
    try:
        launched = [start(executor, ["sh", "-c", f"exit {k}"]) for k in range(8)]
        codes = sorted(run.result().data.get("exit_code") or 0 for run in launched)
        assert codes == list(range(8))
        names = [t.name for t in threading.enumerate()]
        assert "rota-shell-reaper" in names
        assert not [n for n in names if n.startswith("rota-shell-") and n[11:].isdigit()]
        assert executor._threads == []  # no supervision thread was started
    finally:
        executor.close()


def test_a_cancelled_run_is_handed_to_a_thread_that_stops_it(tmp_path: Path) -> None:
    executor = ShellExecutor(tmp_path / "runs", kill_grace_seconds=2.0)
    try:
        run = start(executor, ["sleep", "30"])
        run.ctx.cancel.set()
        result = run.result()
        assert (result.outcome, result.error_code) == ("failed", "cancelled")
        assert len(executor._threads) == 1
    finally:
        executor.close()


def test_closing_executors_leaves_no_descriptor_open(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    first = ShellExecutor(tmp_path / "runs")
    start(first, ["true"]).result()
    first.close()
    before = open_fds()
    for _ in range(10):
        executor = ShellExecutor(tmp_path / "runs")
        start(executor, ["true"]).result()
        executor.close()
    assert open_fds() <= before
