"""The shell executor: runs one attempt as a command in its own process group.

Config (`ctx.config`; errors raise `ExecutorError` naming the field before anything starts)
  command      list of str, required. A string is refused: a list avoids shell-quoting
               surprises, and `["sh", "-c", "..."]` runs a shell line.
  cwd          optional existing working directory.
  environment  optional object of str -> str.
  Unknown keys are refused, so a misspelt key fails at launch instead of being ignored.

Environment and input
  PATH, HOME, LANG and TMPDIR are inherited; then come `environment`, `ctx.env` (secrets and
  the run environment: written nowhere but the child's environment) and ROTA_WORK_ID,
  ROTA_EXECUTION_ID, ROTA_ATTEMPT, ROTA_EPOCH and ROTA_INPUT (the JSON list of input payloads).
  The same JSON is written to stdin, then stdin is closed. ROTA_INPUT is left out above 96 KiB
  (the kernel caps one variable at 128 KiB); stdin always carries it.

Process groups
  The command starts by fork+exec in a new session, so it leads its own group (pgid == pid).
  At once `{"pid", "pgid", "started"}` is persisted (`started`: field 22 of /proc/<pid>/stat,
  which tells a reused pid apart); if that fenced write fails the group is killed and `launch`
  re-raises. `ctx.cancel`, the deadline and `close()` send SIGTERM to the group, then SIGKILL
  after `kill_grace_seconds`. When the command exits, whatever it left running in its group is
  stopped the same way. Processes that leave the group (setsid, setpgid) are out of reach.
  Zombies count as stopped: they run nothing, and some inits never reap orphans.

Outcome (usage is always {"minutes": wall-clock minutes})
  exit 0          completed; data {"exit_code", "stdout_tail", "stderr_tail"}
  exit 78         failed, permanent, error_code "invalid_config": by the EX_CONFIG convention
                  (sysexits.h) the script says its configuration or input is wrong, so
                  retrying cannot help
  exit N          failed, error_code "exit_N" ("signal_N" when killed by signal N)
  ctx.cancel      failed, error_code "cancelled" (message "lease lost" or "cancelled")
  deadline        failed, error_code "timed_out"
  If the last stdout line is a JSON object whose key "rota.result" holds an object, that object
  may set `outcome` (completed, failed, waiting, handoff; on exit 0 only, where failed gives
  error_code "reported_failure": a non-zero exit always fails), `data` (kept as data["result"]),
  `permanent`, `retry_unknown` and `turn` ({"status", "comment"}, kept as data["core.turn.v1"]).
  `validate_result` checks the result; an unsound one becomes a failed result, error_code
  "invalid_result", with the validation message.

Untrusted output
  Each stream is captured in bounded memory (its last `capture_bytes`); data holds the last
  4096 characters of each, decoded as UTF-8 with errors replaced. `ctx.env` values of 6 or more
  characters are replaced by "[redacted]" in tails and messages, so a script that echoes a
  secret (`set -x`, `env`) does not put it in the log; rota.result data holding one is refused
  (invalid_result).

Stop evidence
  `stop` reads the persisted metadata. A live pid with the recorded start time, or a vanished
  leader whose group still runs (Linux never reuses a pid that still names a group), is ours:
  its group gets SIGTERM then SIGKILL, and "stopped" comes once none of it runs. A reused pid or
  one of unknown start time is never signalled: "stopped" only if its group is empty, else
  "unknown". Missing or malformed metadata gives "unknown".
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from rota.domain.errors import InvalidCommand, LeaseLost, RotaError
from rota.domain.results import MAX_MESSAGE, TURN_KEY, Result, validate_result

from .base import Done, Executor, ExecutorError, LaunchContext, StopEvidence

EX_CONFIG = 78
TAIL_CHARS = 4096
RESULT_KEY = "rota.result"
RESULT_FIELDS = ("outcome", "data", "permanent", "retry_unknown", "turn")
OUTCOMES = ("completed", "failed", "waiting", "handoff")
CONFIG_KEYS = ("command", "cwd", "environment")
INHERITED = ("PATH", "HOME", "LANG", "TMPDIR")
MAX_ENV_INPUT = 96 * 1024
MIN_SECRET = 6
REDACTED = "[redacted]"
POLL_SECONDS = 0.05
KILL_WAIT_SECONDS = 5.0  # after SIGKILL, how long to wait for the group to vanish
DRAIN_SECONDS = 1.0  # after the group is gone, how long an escaped holder may keep a pipe open
CHUNK = 64 * 1024


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """State, process group and start time (field 22) from /proc/<pid>/stat, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        fields = raw[raw.rindex(b")") + 2 :].split()  # the name may hold spaces and parens
        return fields[0].decode(), int(fields[2]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _group_running(pgid: int) -> bool:
    """True while a process of group `pgid` runs; zombies do not count."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc"):
        return True  # the signal probe is all the evidence there is
    stats = (_proc_stat(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return any(stat and stat[1] == pgid and stat[0] not in ("Z", "X") for stat in stats)


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class _GroupStopper:
    """SIGTERM a process group, then SIGKILL it once the grace period is over."""

    def __init__(self, pgid: int, grace: float) -> None:
        self.pgid, self.grace = pgid, grace
        self.term_at: float | None = None
        self.kill_at: float | None = None

    def step(self, now: float) -> bool:
        """Send the signal now due; False once waiting after SIGKILL is pointless."""
        if self.term_at is None:
            _signal_group(self.pgid, signal.SIGTERM)
            self.term_at = now
        elif self.kill_at is None and now - self.term_at >= self.grace:
            _signal_group(self.pgid, signal.SIGKILL)
            self.kill_at = now
        return self.kill_at is None or now - self.kill_at < KILL_WAIT_SECONDS


class _Tail:
    """The last `limit` bytes of a stream: memory stays bounded whatever the child writes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk[-self.limit :]
        if len(self.buffer) > self.limit:
            del self.buffer[: len(self.buffer) - self.limit]

    def text(self, secrets: tuple[str, ...]) -> str:
        return _redact(self.buffer.decode("utf-8", errors="replace"), secrets)[-TAIL_CHARS:]


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def _text(value: Any) -> bool:
    return isinstance(value, str) and "\0" not in value


def _variables_ok(env: Any) -> bool:
    return isinstance(env, dict) and all(
        _text(k) and _text(v) and k and "=" not in k for k, v in env.items()
    )


def _parse_config(config: Any) -> tuple[list[str], str | None, dict[str, str]]:
    if not isinstance(config, dict):
        raise ExecutorError("config must be an object with at least `command`")
    unknown = sorted(str(key) for key in config if key not in CONFIG_KEYS)
    if unknown:
        raise ExecutorError(f"config has unknown keys {unknown}; allowed: {list(CONFIG_KEYS)}")
    command = config.get("command")
    if isinstance(command, str):
        raise ExecutorError(
            "config.command must be a list of strings, not a string: a list avoids "
            'shell-quoting surprises; use ["sh", "-c", "..."] to run a shell line'
        )
    if not isinstance(command, list) or not command:
        raise ExecutorError("config.command must be a list of strings (non-empty)")
    if not all(_text(arg) for arg in command):
        raise ExecutorError("config.command must be a list of strings without NUL characters")
    cwd = config.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isdir(cwd)):
        raise ExecutorError(f"config.cwd must name an existing directory, not {cwd!r}")
    environment = config.get("environment") or {}
    if not _variables_ok(environment):
        raise ExecutorError("config.environment must be an object of strings to strings")
    return list(command), cwd, dict(environment)


def _environment(ctx: LaunchContext, extra: dict[str, str], payload: bytes) -> dict[str, str]:
    env = {key: os.environ[key] for key in INHERITED if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(extra)
    env.update(ctx.env)
    env.update(
        ROTA_WORK_ID=ctx.work_id, ROTA_EXECUTION_ID=ctx.execution_id,
        ROTA_ATTEMPT=str(ctx.attempt), ROTA_EPOCH=str(ctx.epoch), ROTA_INPUT=payload.decode(),
    )  # fmt: skip
    if len(payload) > MAX_ENV_INPUT:
        del env["ROTA_INPUT"]
    return env


def _recovery(metadata: Any) -> tuple[int, int, int | None] | None:
    if not isinstance(metadata, dict):
        return None
    pid, pgid, started = metadata.get("pid"), metadata.get("pgid"), metadata.get("started")
    if type(pid) is not int or type(pgid) is not int or min(pid, pgid) < 2:
        return None  # never signal group 0 (our own), 1 (init) or a negative id
    if started is not None and type(started) is not int:
        return None
    return pid, pgid, started


@dataclass
class _Run:
    ctx: LaunchContext
    proc: subprocess.Popen[bytes]
    payload: bytes
    secrets: tuple[str, ...]
    out: _Tail
    err: _Tail
    began: float


def _failed(code: str, message: str, data: Any, usage: dict[str, float]) -> Result:
    return Result(outcome="failed", error_code=code, error_message=message, data=data, usage=usage)


def _by_exit(code: int, data: dict[str, Any], usage: dict[str, float]) -> Result:
    if code == 0:
        return Result(outcome="completed", data=data, usage=usage)
    if code == EX_CONFIG:
        message = "process exited with code 78 (EX_CONFIG): its configuration or input is invalid"
        failed = _failed("invalid_config", message, data, usage)
        return msgspec.structs.replace(failed, permanent=True)
    if code < 0:
        return _failed(f"signal_{-code}", f"process was killed by signal {-code}", data, usage)
    return _failed(f"exit_{code}", f"process exited with code {code}", data, usage)


def _declared(stdout: bytes) -> dict[str, Any] | None:
    """The object under "rota.result" on the last stdout line, if that line declares one."""
    last = stdout.rstrip().rsplit(b"\n", 1)[-1].strip()
    if not last.startswith(b"{"):
        return None
    try:
        line = msgspec.json.decode(last)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(line, dict) or RESULT_KEY not in line:
        return None
    declared = line[RESULT_KEY]
    if not isinstance(declared, dict):
        raise InvalidCommand(f"{RESULT_KEY} must be an object", code="invalid_result")
    return declared


def _apply(base: Result, declared: dict[str, Any], code: int) -> Result:
    unknown = sorted(str(key) for key in declared if key not in RESULT_FIELDS)
    if unknown:
        raise InvalidCommand(f"{RESULT_KEY} has unknown fields {unknown}; allowed: {RESULT_FIELDS}")
    outcome = declared.get("outcome", base.outcome)
    if outcome not in OUTCOMES:
        raise InvalidCommand(f"{RESULT_KEY} outcome must be one of {OUTCOMES}")
    flags = {flag: declared.get(flag, False) for flag in ("permanent", "retry_unknown")}
    if not all(isinstance(value, bool) for value in flags.values()):
        raise InvalidCommand(f"{RESULT_KEY} permanent and retry_unknown must be booleans")
    data = dict(base.data)
    if "data" in declared:
        data["result"] = declared["data"]
    if isinstance(turn := declared.get("turn"), dict):
        turn = {"status": turn.get("status"), "comment": turn.get("comment", "")}
    if "turn" in declared:
        data[TURN_KEY] = turn
    result = msgspec.structs.replace(
        base, data=data, permanent=base.permanent or flags["permanent"],
        retry_unknown=flags["retry_unknown"],
    )  # fmt: skip
    if code != 0:  # a non-zero exit fails whatever the line says
        return result
    if outcome != "failed":
        return msgspec.structs.replace(result, outcome=outcome)
    message = "process exited 0 and reported a failed outcome"
    return msgspec.structs.replace(
        result, outcome="failed", error_code="reported_failure", error_message=message
    )


class ShellExecutor(Executor):
    """Runs `config.command` as a child process group and reports how it ended."""

    name = "shell"
    pool = "jobs"
    capabilities = frozenset({"stop", "interrupt", "recover"})

    def __init__(self, capture_bytes: int = 64 * 1024, kill_grace_seconds: float = 5.0) -> None:
        if capture_bytes < 1 or kill_grace_seconds < 0:
            raise ValueError("capture_bytes must be positive and kill_grace_seconds not negative")
        self.capture_bytes = capture_bytes
        self.kill_grace_seconds = kill_grace_seconds
        self._runs: dict[str, _Run] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        if self._closed.is_set():
            raise ExecutorError("the shell executor is closed")
        command, cwd, extra = _parse_config(ctx.config)
        if not _variables_ok(ctx.env):
            raise ExecutorError("ctx.env must map variable names to strings without NUL")
        if ctx.deadline.tzinfo is None:
            raise ExecutorError("ctx.deadline must be timezone-aware")
        try:
            payload = msgspec.json.encode(ctx.inputs)
        except (TypeError, ValueError, msgspec.EncodeError):
            raise ExecutorError("ctx.inputs cannot be encoded as JSON") from None
        env = _environment(ctx, extra, payload)
        pipe = subprocess.PIPE
        with ctx.phase("executor"):
            try:  # fork+exec in a new session: the child leads its own process group
                proc = subprocess.Popen(
                    command, cwd=cwd, env=env, stdin=pipe, stdout=pipe, stderr=pipe,
                    start_new_session=True,
                )  # fmt: skip
            except OSError as error:
                reason = error.strerror or type(error).__name__
                raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
        began = time.monotonic()
        stat = _proc_stat(proc.pid)
        try:
            ctx.persist_recovery(
                {"pid": proc.pid, "pgid": proc.pid, "started": stat[2] if stat else None}
            )
        except BaseException:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            _close_pipes(proc)
            raise
        secrets = sorted({v for v in ctx.env.values() if len(v) >= MIN_SECRET}, key=len)
        tails = _Tail(self.capture_bytes), _Tail(self.capture_bytes)
        run = _Run(ctx, proc, payload, tuple(reversed(secrets)), *tails, began)
        thread = threading.Thread(
            target=self._watch, args=(run, done), name=f"rota-shell-{proc.pid}", daemon=True
        )
        with self._lock:
            self._runs[ctx.execution_id] = run
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _watch(self, run: _Run, done: Done) -> None:
        """Supervise one process to its end, then call `done` exactly once."""
        try:
            result = self._supervise(run)
        except Exception:
            _signal_group(run.proc.pid, signal.SIGKILL)
            message = "the shell executor failed while supervising the process"
            result = _failed("executor_error", message, None, {})
        finally:
            with self._lock:
                if self._runs.get(run.ctx.execution_id) is run:
                    del self._runs[run.ctx.execution_id]
            _close_pipes(run.proc)
        done(result)

    def _supervise(self, run: _Run) -> Result:
        proc, ctx = run.proc, run.ctx
        assert proc.stdin and proc.stdout and proc.stderr
        tails = {proc.stdout.fileno(): run.out, proc.stderr.fileno(): run.err}
        stdin, pending = proc.stdin.fileno(), memoryview(run.payload)
        code: int | None = None
        reason: str | None = None
        stopper = _GroupStopper(proc.pid, self.kill_grace_seconds)
        drain_until: float | None = None
        with selectors.DefaultSelector() as selector:
            for fd in (*tails, stdin):
                os.set_blocking(fd, False)
                selector.register(
                    fd, selectors.EVENT_WRITE if fd == stdin else selectors.EVENT_READ
                )
            while True:
                for key, _ in selector.select(POLL_SECONDS):
                    if key.fd == stdin:
                        pending = _write_some(stdin, pending)
                        if not pending:
                            selector.unregister(stdin)
                            proc.stdin.close()
                    elif not _read_some(key.fd, tails[key.fd]):
                        selector.unregister(key.fd)
                if code is None:
                    code = proc.poll()
                if code is None and reason is None:
                    reason = self._stop_reason(ctx)
                now = time.monotonic()
                if code is None or _group_running(proc.pid):
                    if (reason or code is not None) and not stopper.step(now):
                        break  # SIGKILL sent long ago and something still lingers
                    continue
                drain_until = drain_until or now + DRAIN_SECONDS
                if not selector.get_map() or now >= drain_until:
                    break
        minutes = (time.monotonic() - run.began) / 60
        return self._result(run, code, reason, minutes)

    def _stop_reason(self, ctx: LaunchContext) -> str | None:
        if ctx.cancel.is_set() or self._closed.is_set():
            return "cancelled"
        if datetime.now(UTC) >= ctx.deadline:
            return "timed_out"
        return None

    def _result(self, run: _Run, code: int | None, reason: str | None, minutes: float) -> Result:
        data = {
            "exit_code": code,
            "stdout_tail": run.out.text(run.secrets),
            "stderr_tail": run.err.text(run.secrets),
        }
        usage = {"minutes": minutes}
        if reason == "timed_out":
            return _failed("timed_out", "the deadline passed; the process was stopped", data, usage)
        if reason is not None or code is None:
            lost = isinstance(run.ctx.cancel_reason, LeaseLost)
            return _failed("cancelled", "lease lost" if lost else "cancelled", data, usage)
        result = _by_exit(code, data, usage)
        try:
            declared = _declared(bytes(run.out.buffer))
            if declared is not None:
                result = _apply(result, declared, code)
            encoded = msgspec.json.encode(validate_result(result).data)
            if any(msgspec.json.encode(secret)[1:-1] in encoded for secret in run.secrets):
                raise InvalidCommand(f"{RESULT_KEY} data holds a value of ctx.env: not stored")
            return result
        except RotaError as error:
            message = _redact(error.message, run.secrets)[:MAX_MESSAGE]
            return _failed("invalid_result", message, data, usage)

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        recovery = _recovery(metadata)
        if recovery is None:
            return "unknown"
        pid, pgid, started = recovery
        if pgid == os.getpgrp():
            return "unknown"  # never signal the scheduler's own group
        with self._lock:
            own = next((r.proc for r in self._runs.values() if r.proc.pid == pid), None)
        if own is not None:
            own.poll()  # reap our own zombie so that it stops counting as alive
        stat = _proc_stat(pid)
        if own is not None and own.returncode is None:
            ours = True
        elif stat is None:  # gone: a group still named by its pid holds only its descendants
            ours = pid == pgid and os.path.isdir("/proc/self")
        else:
            ours = started is not None and stat[2] == started
        if not _group_running(pgid):
            return "stopped"
        if not ours:
            return "unknown"
        stopper = _GroupStopper(pgid, self.kill_grace_seconds)
        while stopper.step(time.monotonic()):
            time.sleep(POLL_SECONDS)
            if own is not None:
                own.poll()
            if not _group_running(pgid):
                return "stopped"
        return "unknown"

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        with self._lock:
            run = self._runs.get(execution_id)
        if run is None or run.ctx.epoch != epoch or run.proc.poll() is not None:
            return False
        return _signal_group(run.proc.pid, signal.SIGTERM)

    def close(self) -> None:
        """Stop every process still running (SIGTERM, SIGKILL after the grace) and join."""
        self._closed.set()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(self.kill_grace_seconds + KILL_WAIT_SECONDS + DRAIN_SECONDS + 1)


def _write_some(fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes now; the rest of `pending` remains."""
    try:
        return pending[os.write(fd, pending[:CHUNK]) :]
    except BlockingIOError:
        return pending
    except OSError:  # the child closed its stdin: it does not want the input
        return pending[:0]


def _read_some(fd: int, tail: _Tail) -> bool:
    """Read what the pipe holds into `tail`; False at end of file."""
    try:
        chunk = os.read(fd, CHUNK)
    except BlockingIOError:
        return True
    tail.feed(chunk)
    return bool(chunk)


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
