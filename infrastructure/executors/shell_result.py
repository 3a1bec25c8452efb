"""A shell run's directory, and how it becomes a `Result`.

`shell.py` holds the contract ("Run directory", "Outcome", "Untrusted output") and watches
the processes; this module holds the run directory (creating it, starting the wrapper in it,
reading its status and tails back, removing it), the mapping of an exit status and output
tails to a Result, the `rota.result` line parsing and secret redaction.

The rota.result line
  If the last stdout line is a JSON object whose key "rota.result" holds an object, that object
  may set `outcome` (completed, failed, waiting, handoff; on exit 0 only, where failed gives
  error_code "reported_failure": a non-zero exit always fails), `data` (kept as data["result"]),
  `permanent`, `retry_unknown` and `turn` ({"status", "comment"}, kept as data["core.turn.v1"]).
  `validate_result` checks the result; an unsound one becomes a failed result, error_code
  "invalid_result", with the validation message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets as random
import select
import signal
import stat
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from rota.domain.errors import InvalidCommand, RotaError
from rota.domain.results import MAX_MESSAGE, TURN_KEY, Result, validate_result

from .base import ExecutorError

EX_CONFIG = 78
TAIL_CHARS = 4096
RESULT_KEY = "rota.result"
RESULT_FIELDS = ("outcome", "data", "permanent", "retry_unknown", "turn")
OUTCOMES = ("completed", "failed", "waiting", "handoff")
REDACTED = "[redacted]"
KILLED = "the process ended without recording its exit status"
RUN_FILES = ("input.json", "stdout", "stderr", "status.tmp", "status")
SAFE = frozenset(string.ascii_letters + string.digits + "._:@-")
START_SECONDS = 30.0  # how long the wrapper may take to start the command

# The group leader of every run: `python -I -S -c WRAPPER <run dir> <report fd> <command...>`.
# It starts the command (argv unchanged; environment read back from /proc because Python
# coerces LC_CTYPE in its own), says b"ok" or the errno on the report pipe, waits, and writes
# the exit code (-N: signal N) to `status` atomically. It ignores SIGHUP, SIGINT and SIGTERM
# (the command gets them at their default) so that it outlives a command they stop. While it
# lives it holds an flock on the run directory: evidence that any pid namespace can read.
WRAPPER = """\
import fcntl, os, signal, sys
run, report, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
fcntl.flock(os.open(run, os.O_RDONLY), fcntl.LOCK_EX)  # held (not inherited) until it exits
for number in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
    if signal.getsignal(number) != signal.SIG_IGN:
        signal.signal(number, lambda *_: None)
try:
    with open("/proc/self/environ", "rb") as file:
        env = dict(item.split(b"=", 1) for item in file.read().split(b"\\0") if b"=" in item)
except OSError:
    env = os.environb
os.set_inheritable(report, False)
try:
    pid = os.posix_spawnp(argv[0], argv, env, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
except Exception as error:
    os.write(report, str(getattr(error, "errno", 0) or 0).encode())
    sys.exit(127)
os.write(report, b"ok")
os.close(report)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
with open(os.path.join(run, "status.tmp"), "w") as file:
    file.write(f"{code}\\n")
os.replace(os.path.join(run, "status.tmp"), os.path.join(run, "status"))
sys.exit(code if code >= 0 else 128 - code)
"""


def run_prefix(execution_id: str) -> str:
    """How the names of an attempt's run directories begin: `<execution id, / as _>-e`."""
    return "".join(c if c in SAFE else "_" for c in execution_id) + "-e"


def make_run(root: Path, execution_id: str, epoch: int) -> Path:
    """A new run directory (0700) in `root`, which is created 0700 if missing and must be a
    directory of this user that no one else may write to."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise ExecutorError(f"runs_dir {root} must be a directory owned by this user")
        if info.st_mode & 0o022:
            raise ExecutorError(f"runs_dir {root} must not be writable by others")
        directory = root / f"{run_prefix(execution_id)}{epoch}-{random.token_hex(4)}"
        directory.mkdir(mode=0o700)
        os.chmod(directory, 0o700)
    except OSError as error:
        raise ExecutorError(f"cannot create a run directory in {root}: {error}") from None
    return directory


def start_in_run(
    directory: Path, command: list[str], cwd: str | None, env: dict[str, str], payload: bytes
) -> subprocess.Popen[bytes]:
    """Write the input, start the wrapper in a new session and, through it, the command;
    ExecutorError (and nothing left running) if the command did not start."""
    if not sys.executable:
        raise ExecutorError("no Python interpreter to run the shell wrapper")
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    report, writer = os.pipe()
    opened = [writer]
    try:
        with open(os.open(directory / "input.json", create, 0o600), "wb") as file:
            file.write(payload)
        opened.append(os.open(directory / "input.json", os.O_RDONLY | os.O_CLOEXEC))
        opened += [os.open(directory / name, create, 0o600) for name in ("stdout", "stderr")]
        argv = [sys.executable, "-I", "-S", "-c", WRAPPER, str(directory), str(writer), *command]
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=opened[1], stdout=opened[2], stderr=opened[3],
            pass_fds=(writer,), start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        os.close(report)
        reason = error.strerror or type(error).__name__
        raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
    finally:
        for fd in opened:
            os.close(fd)
    try:
        answer = _read_report(report)
    finally:
        os.close(report)
    if answer == b"ok":
        return proc
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    code = int(answer) if answer.isdigit() else 0
    reason = os.strerror(code) if code else "the shell wrapper did not start it"
    raise ExecutorError(f"could not start {command[0]!r}: {reason}")


def _read_report(fd: int) -> bytes:
    """What the wrapper says about starting the command: b"ok" or an errno (until EOF)."""
    answer, deadline = b"", time.monotonic() + START_SECONDS
    while len(answer) < 64 and select.select([fd], [], [], max(0, deadline - time.monotonic()))[0]:
        chunk = os.read(fd, 64)
        if not chunk:
            break
        answer += chunk
    return answer


def run_of(execution_id: str, metadata: dict[str, Any]) -> Path | None:
    """The run directory the metadata names, if it is an absolute one of this attempt."""
    run = metadata.get("run")
    if not isinstance(run, str) or "\0" in run or not os.path.isabs(run):
        return None
    path = Path(run)
    return path if path.name.startswith(run_prefix(execution_id)) else None


def read_status(directory: Path) -> int | None:
    """The exit code the wrapper recorded (-N: signal N); None while there is none."""
    try:
        return int((directory / "status").read_bytes()[:32])
    except (OSError, ValueError):
        return None


def read_tail(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of a file (b"" if it is missing); only those are read."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - limit))
            return file.read(limit)
    except OSError:
        return b""


def wrapper_alive(directory: Path) -> bool:
    """Whether a wrapper still holds the lock of the run directory (False if it is missing)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held (or the lock cannot be tested: assume it is)
    finally:
        os.close(fd)  # releases the lock if this call took it
    return False


def remove_run(directory: Path) -> None:
    """Best effort: remove the files a run directory holds, then the directory."""
    for name in RUN_FILES:
        with contextlib.suppress(OSError):
            os.unlink(directory / name)
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every secret replaced (pass the longest secrets first)."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def tail_text(raw: bytes, secrets: tuple[str, ...]) -> str:
    return redact(raw.decode("utf-8", errors="replace"), secrets)[-TAIL_CHARS:]


def build_result(
    code: int | None,
    reason: str | None,
    stdout: bytes,
    stderr: bytes,
    secrets: tuple[str, ...],
    lease_lost: bool,
    minutes: float,
) -> Result:
    """The Result of a run: `code` is the exit code (-N: killed by signal N; None: unknown),
    `reason` "cancelled" or "timed_out" when rota stopped it, `stdout`/`stderr` the tails."""
    data = {
        "exit_code": code,
        "stdout_tail": tail_text(stdout, secrets),
        "stderr_tail": tail_text(stderr, secrets),
    }
    usage = {"minutes": minutes}
    if reason == "timed_out":
        return _failed("timed_out", "the deadline passed; the process was stopped", data, usage)
    if reason is not None:
        return _failed("cancelled", "lease lost" if lease_lost else "cancelled", data, usage)
    if code is None:
        return _failed("killed", KILLED, data, usage)
    result = _by_exit(code, data, usage)
    try:
        declared = _declared(stdout)
        if declared is not None:
            result = _apply(result, declared, code)
        encoded = msgspec.json.encode(validate_result(result).data)
        if any(msgspec.json.encode(secret)[1:-1] in encoded for secret in secrets):
            raise InvalidCommand(f"{RESULT_KEY} data holds a value of ctx.env: not stored")
        return result
    except RotaError as error:
        message = redact(error.message, secrets)[:MAX_MESSAGE]
        return _failed("invalid_result", message, data, usage)


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
