"""A shell run's directory, and how it becomes a `Result`.

`shell.py` holds the contract ("Run directory", "Outcome", "Untrusted output") and watches
the processes; this module holds the run directory (creating it, starting the wrapper in it,
letting it go, reading its status and tails back, removing it), the mapping of an exit status
and output tails to a Result, the `rota.result` line parsing and secret redaction.

The rota.result line
  If the last stdout line is a JSON object whose key "rota.result" holds an object, that object
  may set `outcome` (completed, failed, waiting, handoff; on exit 0 only, where failed gives
  error_code "reported_failure": a non-zero exit always fails), `data` (kept as data["result"]),
  `permanent`, `retry_unknown`, `turn` ({"status", "comment"}, kept as data["core.turn.v1"])
  and `usage`: an object of amounts by unit ({"usd": 0.42, "tokens": 1800}), reported beside
  the wall-clock "minutes" the executor measures itself (a non-zero exit's too), which budgets
  charge. Each unit matches ^[a-z][a-z0-9_]{0,31}$ and is not turns or attempts (rota counts
  those) nor minutes; each amount is a finite, non-negative number.
  `validate_result` checks the result; an unsound one becomes a failed result, error_code
  "invalid_result", with the validation message (and only the minutes as usage).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from rota.application.errors import ExecutorError
from rota.domain.errors import DomainCode, InvalidCommand, RotaError
from rota.domain.results import MAX_MESSAGE, TURN_KEY, Result, validate_result

EX_CONFIG = 78
TAIL_CHARS = 4096
RESULT_KEY = "rota.result"
RESULT_FIELDS = ("outcome", "data", "permanent", "retry_unknown", "turn", "usage")
MINUTES = "minutes"  # the usage unit the executor reports itself: a run's wall-clock minutes
OUTCOMES = ("completed", "failed", "waiting", "handoff")
REDACTED = "[redacted]"
KILLED = "the process ended without recording its exit status"
RUN_FILES = ("input.json", "stdout", "stderr", "status.tmp", "status", "go", "abandoned")
SAFE = frozenset(string.ascii_letters + string.digits + "._:@-")
START_SECONDS = 30.0  # how long the wrapper may take to start (and then to start the command)
HOLD_SECONDS = 30.0  # how long a wrapper waits for `go` before it gives up
ABANDONED = 125  # the wrapper's exit code when it gave up without starting the command

# The group leader of every run:
#   python -I -S -c WRAPPER <run dir> <report fd> <wake fd> <launcher pid> <hold s> <command...>
# It takes an flock on the run directory (held while it lives: evidence that any pid namespace
# can read), says b"h" on the report pipe and holds the command back until the file `go`
# appears in the run directory: the launcher creates it once the launch is pinned (its
# recovery metadata persisted) and then writes to the wake pipe. If the launcher dies first
# (its pid is no longer the parent, or the wake pipe reaches its end) or `hold` seconds pass,
# the wrapper creates `abandoned` and exits with code 125, having started nothing and written
# no `status`; it looks for `go` every 20 ms at most. Once let go it starts the command (argv,
# cwd, stdin, stdout and stderr unchanged; environment read back from /proc because Python
# coerces LC_CTYPE in its own), says b"ok" or the errno on the report pipe, waits, and writes
# the exit code (-N: signal N) to `status` atomically. It ignores SIGHUP, SIGINT and SIGTERM
# (the command gets them at their default) so that it outlives a command they stop.
WRAPPER = """\
import fcntl, os, select, signal, sys, time
run, hold, argv = sys.argv[1], float(sys.argv[5]), sys.argv[6:]
report, wake, launcher = (int(arg) for arg in sys.argv[2:5])
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
os.set_inheritable(wake, False)
def say(message):  # the launcher may be dead by now: a broken pipe must not stop us
    try:
        os.write(report, message)
    except OSError:
        pass
say(b"h")
go, waking, until = os.path.join(run, "go"), [wake], time.monotonic() + hold
while not os.path.exists(go):  # the command starts only once its launch is pinned
    if not waking or os.getppid() != launcher or time.monotonic() >= until:
        os.close(os.open(os.path.join(run, "abandoned"), os.O_WRONLY | os.O_CREAT, 0o600))
        sys.exit(125)  # decided after the last look for `go`: the command never starts
    if select.select(waking, [], [], 0.02)[0] and not os.read(wake, 64):
        waking = []  # end of file: the launcher died or gave up
os.close(wake)
try:
    pid = os.posix_spawnp(argv[0], argv, env, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
except Exception as error:
    say(str(getattr(error, "errno", 0) or 0).encode())
    sys.exit(127)
say(b"ok")
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


@dataclass
class Wrapper:
    """A wrapper that holds its run directory's lock and the command back until `release`."""

    directory: Path
    program: str
    proc: subprocess.Popen[bytes]
    report: int  # read end: b"h", then b"ok" or an errno
    wake: int  # write end: a byte after `go` was created; closing it tells "given up"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        """Let the command start (the launch is pinned): create `go` atomically, wake the
        wrapper and wait for its report; ExecutorError if the command did not start."""
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(self.directory / "go", create, 0o600))
        except OSError as error:
            raise ExecutorError(f"could not let {self.program!r} start: {error}") from None
        with contextlib.suppress(OSError):  # a wrapper that gave up no longer reads it
            os.write(self.wake, b"g")
        self.close_wake()
        answer = _read_report(self.report)
        if answer == b"ok":
            return
        code = int(answer) if answer.isdigit() else 0
        if code:
            reason = os.strerror(code)
        elif (self.directory / "abandoned").exists():
            reason = "the shell wrapper gave up waiting for the launch to be pinned"
        else:
            reason = "the shell wrapper did not start it"
        raise ExecutorError(f"could not start {self.program!r}: {reason}")

    def close_wake(self) -> None:
        if self.wake >= 0:
            os.close(self.wake)
            self.wake = -1

    def close(self) -> None:
        """Close both pipe ends (idempotent); a wrapper still holding back then gives up."""
        self.close_wake()
        if self.report >= 0:
            os.close(self.report)
            self.report = -1


def start_wrapper(
    directory: Path,
    command: list[str],
    cwd: str | None,
    env: dict[str, str],
    payload: bytes,
    hold: float = HOLD_SECONDS,
) -> Wrapper:
    """Write the input and start the wrapper in a new session; return once it holds the run
    directory's lock, with the command held back until `Wrapper.release`. ExecutorError (and
    nothing left running) if the wrapper did not start."""
    if not sys.executable:
        raise ExecutorError("no Python interpreter to run the shell wrapper")
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    report, writer = os.pipe()
    listener, wake = os.pipe()
    opened = [writer, listener]
    try:
        with open(os.open(directory / "input.json", create, 0o600), "wb") as file:
            file.write(payload)
        opened.append(os.open(directory / "input.json", os.O_RDONLY | os.O_CLOEXEC))
        opened += [os.open(directory / name, create, 0o600) for name in ("stdout", "stderr")]
        held = [str(directory), str(writer), str(listener), str(os.getpid()), str(float(hold))]
        argv = [sys.executable, "-I", "-S", "-c", WRAPPER, *held, *command]
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=opened[2], stdout=opened[3], stderr=opened[4],
            pass_fds=(writer, listener), start_new_session=True,
        )  # fmt: skip
    except OSError as error:
        os.close(report)
        os.close(wake)
        reason = error.strerror or type(error).__name__
        raise ExecutorError(f"could not start {command[0]!r}: {reason}") from None
    finally:
        for fd in opened:
            os.close(fd)
    wrapper = Wrapper(directory, command[0], proc, report, wake)
    ready = select.select([report], [], [], START_SECONDS)[0]
    if ready and os.read(report, 1) == b"h":
        return wrapper
    wrapper.close()
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raise ExecutorError(f"could not start {command[0]!r}: the shell wrapper did not start")


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


def held_back(directory: Path) -> bool | None:
    """Whether the wrapper of a run that waits for `go` never started its command and never
    will: True (it gave up, or it is gone and `go` never came), False (`go` came: it may have
    started) or None (it still waits)."""
    if (directory / "abandoned").exists():
        return True  # created after its last look for `go`: a final decision
    if (directory / "go").exists():
        return False
    if wrapper_alive(directory):
        return None
    return not (directory / "go").exists()  # looked at again: it may have come meanwhile


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
    usage = {MINUTES: minutes}
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
        raise InvalidCommand(f"{RESULT_KEY} must be an object", code=DomainCode.INVALID_RESULT)
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
        base, data=data, usage=_usage(base.usage, declared.get("usage", {})),
        permanent=base.permanent or flags["permanent"], retry_unknown=flags["retry_unknown"],
    )  # fmt: skip
    if code != 0:  # a non-zero exit fails whatever the line says
        return result
    if outcome != "failed":
        return msgspec.structs.replace(result, outcome=outcome)
    message = "process exited 0 and reported a failed outcome"
    return msgspec.structs.replace(
        result, outcome="failed", error_code="reported_failure", error_message=message
    )


def _usage(measured: dict[str, float], declared: Any) -> dict[str, float]:
    """The measured minutes and the declared units (their names and amounts are checked by
    `validate_result`, as every executor's usage is)."""
    if not isinstance(declared, dict):
        raise InvalidCommand(
            f"{RESULT_KEY} usage must be an object of amounts by unit",
            code=DomainCode.INVALID_USAGE,
        )
    if MINUTES in declared:
        raise InvalidCommand(
            f"{RESULT_KEY} usage cannot report {MINUTES!r}: the shell executor measures a run's "
            "wall-clock minutes itself",
            code=DomainCode.INVALID_USAGE,
        )
    return {**measured, **declared}
