"""The shell executor, driven with real processes: outcomes, capture, secrets, cancel, stop."""

from __future__ import annotations

import os
import queue
import secrets
import select
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rota.domain.errors import LeaseLost
from rota.domain.results import Result
from rota.infrastructure.executors.base import ExecutorError, LaunchContext
from rota.infrastructure.executors.shell import ShellExecutor, _Tail

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
def executor() -> Iterator[ShellExecutor]:
    shell = ShellExecutor(kill_grace_seconds=2.0)
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
    run = start(executor, ["sh", "-c", "echo out; echo err >&2"])
    result = run.result()
    assert result.outcome == "completed" and result.error_code is None
    assert result.data == {"exit_code": 0, "stdout_tail": "out\n", "stderr_tail": "err\n"}
    assert 0 < result.usage["minutes"] < 1
    assert run.phases == [("executor", None), ("executor", "ok")]
    [metadata] = run.persisted
    assert metadata["pgid"] == metadata["pid"] and isinstance(metadata["started"], int)


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
    result = start(executor, ["sh", "-c", 'echo "${ROTA_INPUT:-unset}"; wc -c'], inputs=inputs)
    assert result.result().data["stdout_tail"].split() == ["unset", "200004"]


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


def test_the_tail_buffer_never_grows_beyond_its_limit() -> None:
    tail, most = _Tail(1000), 0
    for index in range(80):  # 5 MB in 64 KiB chunks, then one chunk larger than the limit
        tail.feed(bytes([index]) * 65536)
        most = max(most, len(tail.buffer))
    tail.feed(b"a" * 5000 + b"end")
    assert most == 1000 and bytes(tail.buffer) == b"a" * 997 + b"end"


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
    result = run.result()
    assert (result.outcome, result.error_code) == ("failed", "timed_out")
    assert 0.4 / 60 < result.usage["minutes"] < WAIT / 60
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
        ({"command": "echo hi"}, r'config\.command must be a list of strings.*\["sh", "-c"'),
        ({}, r"config\.command must be a list of strings"),
        ({"command": []}, r"config\.command must be a list of strings"),
        ({"command": ["echo", 3]}, r"config\.command must be a list of strings"),
        ({"command": ["true"], "cwd": 5}, r"config\.cwd"),
        ({"command": ["true"], "cwd": "/nonexistent/rota"}, r"config\.cwd"),
        ({"command": ["true"], "environment": {"A": 1}}, r"config\.environment"),
        ({"command": ["true"], "environment": ["A=1"]}, r"config\.environment"),
        ({"command": ["true"], "enviroment": {}}, r"unknown keys \['enviroment'\]"),
        (["true"], r"config must be an object"),
    ],
)
def test_config_errors_name_the_field_before_anything_starts(
    executor: ShellExecutor, config: Any, message: str
) -> None:
    ctx, persisted, phases = make_context(config)
    with pytest.raises(ExecutorError, match=message):
        executor.launch(ctx, lambda result: None)
    assert persisted == [] and phases == []


def test_a_missing_program_fails_the_executor_phase(executor: ShellExecutor) -> None:
    ctx, persisted, phases = make_context({"command": ["/nonexistent/rota-program"]})
    with pytest.raises(ExecutorError, match="could not start"):
        executor.launch(ctx, lambda result: None)
    assert persisted == [] and phases == [("executor", None), ("executor", "failed")]


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
    stopper = ShellExecutor(kill_grace_seconds=2.0) if restarted else executor
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
