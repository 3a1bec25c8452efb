"""The shell executor: runs one attempt as a command in its own process group.

Config (`ctx.config`; errors raise `InvalidExecutorConfig` naming the field, before anything
starts: `validate_config` checks a binding when it is loaded or defined, `launch` again)
  command      list of str, required. A string is refused: a list avoids shell-quoting
               surprises, and `["sh", "-c", "..."]` runs a shell line.
  cwd          optional working directory; it must exist at launch (a launch whose `cwd`
               is gone fails permanently, `invalid_config`).
  environment  optional object of str -> str.
  Unknown keys are refused, so a misspelt key fails when the binding is loaded instead of
  being ignored.

Environment and input
  PATH, HOME, LANG and TMPDIR are inherited; then come `environment`, `ctx.env` (secrets and
  the run environment: written nowhere but the child's environment) and ROTA_WORK_ID,
  ROTA_EXECUTION_ID, ROTA_ATTEMPT, ROTA_EPOCH and ROTA_INPUT (the JSON list of input payloads).
  The same JSON is the command's stdin (the file `input.json`). ROTA_INPUT is left out above
  96 KiB (the kernel caps one variable at 128 KiB); stdin always carries it.

Run directory: nothing of a run depends on the daemon that launched it staying alive
  Each launch gets `runs_dir/<execution id, / as _>-e<epoch>-<8 hex>/` (mode 0700; `runs_dir`
  defaults to `<tempdir>/rota-runs-<uid>`, created 0700; it must be ours and writable by no
  one else) holding `input.json`, `stdout` and `stderr` (files, not pipes: a dead daemon
  cannot SIGPIPE the command) and, once the command ended, `status`: its exit code, -N when
  killed by signal N. A tiny wrapper (`python -I -S`, see `shell_result.WRAPPER`) leads the
  group: it holds an flock on the run directory, holds the command back until the launch is
  pinned (below), starts it with its argv, environment, cwd and standard streams unchanged (a
  start failure, such as no such program, still makes `launch` raise), waits, writes `status`
  (atomically, by absolute path) and exits. It ignores SIGTERM, SIGINT and SIGHUP, which the
  command gets at their default, so that it records a command they stopped.
  The directory is removed once the result was reported and the group is gone, or when
  recovery or `stop` finds the run over. A daemon that crashed leaves its run directories
  behind until recovery reports their result (or `stop` verifies the run stopped). On disk
  the output files are not bounded: only what is read of them is.

Isolation: nothing runs until the launch is pinned (`isolates = True`)
  The host marks the invoke `isolated`, so an attempt whose launch lost its lease before it
  pinned anything is relaunched, not adopted (rota.domain.recovery). That holds because the
  wrapper starts nothing until the file `go` appears in its run directory, and `launch`
  creates `go` (atomically) only after `ctx.persist_recovery` succeeded. A wrapper whose
  launching process dies first (its parent pid changes, polled every 20 ms at most, or the
  wake pipe from the launcher reaches its end) or that waited `hold_seconds` (default 30)
  creates `abandoned` and exits (code 125) without starting the command or writing `status`.
  The `executor` launch phase covers all of it: run directory, wrapper, persist, `go` and the
  wrapper's report that the command started.

Process groups
  The wrapper starts by fork+exec in a new session, so it leads its own group (pgid == pid).
  Once it holds its lock, `{"pid", "pgid", "started", "run", "hold", "host", "boot", "pidns"}`
  is persisted (`started`: field 22 of /proc/<pid>/stat, which tells a reused pid apart;
  `hold`: true, the wrapper waits for `go`; host name, boot id and pid namespace say where the
  pid means something); if that fenced write fails, `go` is never created, the group is
  killed, the run directory removed and `launch` re-raises: nothing of the command ran.
  `ctx.cancel`, the deadline and `close()` send SIGTERM to the
  group, then SIGKILL after `kill_grace_seconds`. When the command exits, whatever it left
  running in its group is stopped the same way. Processes that leave the group (setsid,
  setpgid) are out of reach. Zombies count as stopped: they run nothing.

Outcome (usage is {"minutes": wall-clock minutes}, and the units a rota.result line reports)
  exit 0          completed; data {"exit_code", "stdout_tail", "stderr_tail"}
  exit 78         failed, permanent, error_code "invalid_config": by the EX_CONFIG convention
                  (sysexits.h) the script says its configuration or input is wrong, so
                  retrying cannot help
  exit N          failed, error_code "exit_N" ("signal_N" when killed by signal N)
  no status       failed, error_code "killed": the wrapper itself was killed (SIGKILL)
  ctx.cancel      failed, error_code "cancelled" (message "lease lost" or "cancelled")
  deadline        failed, error_code "timed_out"
  The last stdout line may hold a "rota.result" object (see `shell_result.py`): `outcome`,
  `data`, `permanent`, `retry_unknown`, `turn`, and `usage`, amounts by unit reported beside
  the minutes for budgets to charge:
      {"rota.result": {"usage": {"usd": 0.42, "tokens": 1800}}}
  (units ^[a-z][a-z0-9_]{0,31}$ other than turns, attempts and minutes; finite amounts >= 0).
  An unsound line gives "invalid_result".

Untrusted output
  Only the last `capture_bytes` of each file are read; data holds the last 4096 characters of
  each, decoded as UTF-8 with errors replaced. `ctx.env` values of 6 or more characters are
  replaced by "[redacted]" in tails and messages; rota.result data holding one is refused.
  A recovered run is redacted with the recovering `ctx.env`.

Where a pid means something
  Metadata of another host name: "unknown" (recover and stop). Of an earlier boot of this
  host: none of it runs. Of another pid namespace (a restarted container): none of it runs
  unless the wrapper's flock on the run directory is still held ("unknown"); only the
  wrapper holds it, so a command whose wrapper alone was SIGKILLed there goes unseen.

Recovery (`recover`)
  Metadata None or unusable, or a group whose leader cannot be verified: "unknown". A run
  whose metadata says `hold` and whose directory has no `go` (its launcher stopped between
  pinning the metadata and creating `go`): "unknown" while its wrapper still waits; once it
  gave up (`abandoned`) or is gone, the command never ran and never will: "stopped", and the
  directory goes. An `abandoned` run is "stopped" even if `go` came late. (A launch that
  pinned nothing is relaunched without asking `recover`.) A run that recorded its `status`
  is reported ("attached"; what it left in its group is stopped first). A group still
  running here (leader's pid and start time match, or the leader gone and its group still
  named by its pid) is watched ("attached"; `ctx.cancel`, the deadline, `interrupt` and
  `stop` act on it as on a launched run; no `status` at its end gives "killed"). Nothing
  running and no `status`: "stopped", and the directory goes. Metadata without "run" (an
  older launch that piped to its dead owner): "unknown" while its group runs, else
  "stopped". A run still watched by this executor (its lease was lost, not its process) is
  handed to the new `done`. `close()` stops watching adopted runs, leaving them running for
  the next recovery.

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
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from rota.application.errors import ExecutorError, InvalidExecutorConfig
from rota.application.ports import Done, Executor, LaunchContext, Recovery, StopEvidence
from rota.domain.errors import LeaseLost
from rota.domain.results import Result
from rota.infrastructure.executors.shell_result import (
    HOLD_SECONDS,
    build_result,
    held_back,
    make_run,
    read_status,
    read_tail,
    remove_run,
    run_of,
    run_prefix,
    start_wrapper,
    wrapper_alive,
)

CONFIG_KEYS = ("command", "cwd", "environment")
INHERITED = ("PATH", "HOME", "LANG", "TMPDIR")
MAX_ENV_INPUT = 96 * 1024
MIN_SECRET = 6
POLL_SECONDS = 0.05
KILL_WAIT_SECONDS = 5.0  # after SIGKILL, how long to wait for the group to vanish


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


def _identity(pid: int, pgid: int, started: int | None) -> bool | None:
    """Whether group `pgid` is the one `pid` led: True, False (the pid was reused) or None."""
    stat = _proc_stat(pid)
    if stat is None:  # gone: a group still named by its pid holds only its descendants
        return pid == pgid and os.path.isdir("/proc/self")
    return None if started is None else stat[2] == started


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_group(pgid: int) -> None:
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while _group_running(pgid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS / 5)


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


def _machine() -> dict[str, Any]:
    """Where a pid means something: host name, boot id and pid namespace (None: unknown)."""
    boot = pidns = None
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.suppress(OSError):
        pidns = os.stat("/proc/self/ns/pid").st_ino
    return {"host": socket.gethostname(), "boot": boot, "pidns": pidns}


def _whereabouts(metadata: dict[str, Any], here: dict[str, Any]) -> str:
    """Where the metadata's pid lives: "here", "elsewhere" (another host), "rebooted" (an
    earlier boot of this host: none of it runs) or "namespace" (another pid namespace)."""

    def differs(key: str) -> bool:
        return None not in (metadata.get(key), here[key]) and metadata[key] != here[key]

    if differs("host"):
        return "elsewhere"
    if differs("boot"):
        return "rebooted"
    return "namespace" if differs("pidns") else "here"


def _locate(metadata: dict[str, Any], here: dict[str, Any], directory: Path | None) -> str:
    """ "here", "unknown" (it may run where its pid means nothing here) or "gone"."""
    where = _whereabouts(metadata, here)
    if where == "namespace":  # only the wrapper's lock on its run directory can tell
        where = "unknown" if directory is None or wrapper_alive(directory) else "gone"
    return {"elsewhere": "unknown", "rebooted": "gone"}.get(where, where)


def _text(value: Any) -> bool:
    return isinstance(value, str) and "\0" not in value


def _variables_ok(env: Any) -> bool:
    return isinstance(env, dict) and all(
        _text(k) and _text(v) and k and "=" not in k for k, v in env.items()
    )


def _check_config(config: Any) -> None:
    """The rules a config must keep whatever the machine: `ShellExecutor.validate_config`."""
    if not isinstance(config, Mapping):
        raise InvalidExecutorConfig("", "must be an object with at least `command`")
    unknown = sorted(str(key) for key in config if key not in CONFIG_KEYS)
    if unknown:
        also = f" (also unknown: {unknown[1:]})" if len(unknown) > 1 else ""
        raise InvalidExecutorConfig(unknown[0], f"unknown key{also}; allowed: {list(CONFIG_KEYS)}")
    command = config.get("command")
    if isinstance(command, str):
        raise InvalidExecutorConfig(
            "command",
            "must be a list of strings, not a string: a list avoids shell-quoting "
            'surprises; use ["sh", "-c", "..."] to run a shell line',
        )
    if not isinstance(command, list) or not command:
        raise InvalidExecutorConfig("command", "must be a list of strings (non-empty)")
    if not all(_text(arg) for arg in command):
        raise InvalidExecutorConfig("command", "must be a list of strings without NUL characters")
    cwd = config.get("cwd")
    if cwd is not None and not _text(cwd):
        raise InvalidExecutorConfig("cwd", f"must be a directory's path, not {cwd!r}")
    if not _variables_ok(config.get("environment") or {}):
        raise InvalidExecutorConfig("environment", "must be an object of strings to strings")


def _parse_config(config: Any) -> tuple[list[str], str | None, dict[str, str]]:
    _check_config(config)
    cwd = config.get("cwd")
    if cwd is not None and not os.path.isdir(cwd):  # it may have gone since it was checked
        raise InvalidExecutorConfig("cwd", f"must name an existing directory, not {cwd!r}")
    return list(config["command"]), cwd, dict(config.get("environment") or {})


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


def _secrets(ctx: LaunchContext) -> tuple[str, ...]:
    values = {v for v in ctx.env.values() if isinstance(v, str) and len(v) >= MIN_SECRET}
    return tuple(sorted(values, key=len, reverse=True))  # longest first


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
    done: Done
    directory: Path
    pid: int  # the wrapper: it leads the group (pgid == pid)
    started: int | None
    secrets: tuple[str, ...]
    proc: subprocess.Popen[bytes] | None = None  # None: adopted from an earlier owner
    began: float = 0.0  # time.monotonic() at launch
    group: bool = True  # False: only report the status (the pid means nothing here)


class ShellExecutor(Executor):
    """Runs `config.command` as a child process group and reports how it ended."""

    name = "shell"
    pool = "jobs"
    capabilities = frozenset({"stop", "interrupt", "recover"})
    stable = True
    isolates = True  # the wrapper starts nothing until the launch is pinned (`go`)

    def __init__(
        self,
        runs_dir: str | os.PathLike[str] | None = None,
        capture_bytes: int = 64 * 1024,
        kill_grace_seconds: float = 5.0,
        hold_seconds: float = HOLD_SECONDS,
    ) -> None:
        if capture_bytes < 1 or kill_grace_seconds < 0:
            raise ValueError("capture_bytes must be positive and kill_grace_seconds not negative")
        if not hold_seconds > 0:
            raise ValueError("hold_seconds must be positive")
        if runs_dir is None:
            runs_dir = Path(tempfile.gettempdir()) / f"rota-runs-{os.getuid()}"
        self.runs_dir = Path(os.path.abspath(runs_dir))
        self.capture_bytes = capture_bytes
        self.kill_grace_seconds = kill_grace_seconds
        self.hold_seconds = float(hold_seconds)
        self._machine = _machine()
        self._runs: dict[str, _Run] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> None:
        """`command` a non-empty list of strings, `cwd` a path, `environment` strings to
        strings, no other key; at launch `cwd` must also exist."""
        _check_config(config)

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
        with ctx.phase("executor"):
            directory = make_run(self.runs_dir, ctx.execution_id, ctx.epoch)
            try:
                wrapper = start_wrapper(directory, command, cwd, env, payload, self.hold_seconds)
            except BaseException:
                remove_run(directory)
                raise
            pid = wrapper.pid
            try:
                stat = _proc_stat(pid)
                started = stat[2] if stat else None
                metadata = {"pid": pid, "pgid": pid, "started": started, "run": str(directory)}
                ctx.persist_recovery({**metadata, "hold": True, **self._machine})
                wrapper.release()  # pinned: only now may the command start
            except BaseException:
                wrapper.close()  # no `go`: the wrapper started nothing (or failed to)
                _kill_group(pid)
                wrapper.proc.wait()
                remove_run(directory)
                raise
            finally:
                wrapper.close()
        began = time.monotonic()
        self._watch(_Run(ctx, done, directory, pid, started, _secrets(ctx), wrapper.proc, began))

    def _watch(self, run: _Run) -> None:
        thread = threading.Thread(
            target=self._follow, args=(run,), name=f"rota-shell-{run.pid}", daemon=True
        )
        with self._lock:
            self._runs[run.ctx.execution_id] = run
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _follow(self, run: _Run) -> None:
        """Supervise one run to its end, then call its `done` exactly once."""
        result: Result | None
        try:
            result = self._supervise(run)
        except Exception:
            if run.group and _identity(run.pid, run.pid, run.started):
                _signal_group(run.pid, signal.SIGKILL)
            message = "the shell executor failed while supervising the process"
            result = Result(outcome="failed", error_code="executor_error", error_message=message)
        finally:
            with self._lock:
                if self._runs.get(run.ctx.execution_id) is run:
                    del self._runs[run.ctx.execution_id]
                done = run.done  # `recover` may have handed the run a newer callback
        if result is None:
            return  # closed: an adopted run keeps running and is no longer watched
        done(result)
        # The run directory stays until `forget`: the host has only queued the result in
        # memory, and if it dies before the outcome is appended, recovery reads it here.

    def _supervise(self, run: _Run) -> Result | None:
        stopper = _GroupStopper(run.pid, self.kill_grace_seconds)
        reason: str | None = None
        while run.group:
            ended = not self._leader_running(run) or read_status(run.directory) is not None
            if not ended and reason is None:
                reason = self._stop_reason(run)
                if reason == "closed":
                    return None
            if ended and not self._group_alive(run):
                break
            if (reason or ended) and not stopper.step(time.monotonic()):
                break  # SIGKILL sent long ago and something still lingers
            proc = run.proc
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(POLL_SECONDS)
            else:
                time.sleep(POLL_SECONDS)
        return build_result(
            read_status(run.directory), reason,
            read_tail(run.directory / "stdout", self.capture_bytes),
            read_tail(run.directory / "stderr", self.capture_bytes),
            run.secrets, isinstance(run.ctx.cancel_reason, LeaseLost), self._minutes(run),
        )  # fmt: skip

    def _leader_running(self, run: _Run) -> bool:
        if run.proc is not None:
            return run.proc.poll() is None
        stat = _proc_stat(run.pid)
        return stat is not None and stat[0] not in ("Z", "X") and run.started in (None, stat[2])

    def _group_alive(self, run: _Run) -> bool:
        """Whether the run's group still runs; never mistakes a reused pid's group for it."""
        stat = _proc_stat(run.pid)
        if stat is not None and run.started is not None and stat[2] != run.started:
            return False  # the pid names another process: our group had emptied before
        return _group_running(run.pid)

    def _stop_reason(self, run: _Run) -> str | None:
        if run.ctx.cancel.is_set():
            return "cancelled"
        if self._closed.is_set():
            return "cancelled" if run.proc is not None else "closed"
        if datetime.now(UTC) >= run.ctx.deadline:
            return "timed_out"
        return None

    def _minutes(self, run: _Run) -> float:
        if run.proc is not None:
            return (time.monotonic() - run.began) / 60
        end = began = time.time()
        with contextlib.suppress(OSError):
            end = (run.directory / "status").stat().st_mtime
        if run.group and run.started is not None:  # boot-relative ticks, same boot
            with contextlib.suppress(OSError, ValueError, AttributeError):
                ticks = os.sysconf("SC_CLK_TCK")
                began -= time.clock_gettime(time.CLOCK_BOOTTIME) - run.started / ticks
        else:
            with contextlib.suppress(OSError):
                began = (run.directory / "input.json").stat().st_mtime
        return max(0.0, end - began) / 60

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        if self._closed.is_set() or ctx.deadline.tzinfo is None:
            return "unknown"
        ids = _recovery(metadata)
        if ids is None or ids[0] != ids[1]:
            return "unknown"
        pid, _, started = ids
        directory = run_of(ctx.execution_id, metadata)
        with self._lock:  # still watched here (the lease was lost, not the process)
            run = self._runs.get(ctx.execution_id)
            if run is not None and run.pid == pid and run.directory == directory:
                run.ctx, run.done = ctx, done
                run.secrets = tuple(sorted({*run.secrets, *_secrets(ctx)}, key=len)[::-1])
                return "attached"
        where = _locate(metadata, self._machine, directory)
        if where == "unknown" or (where == "here" and pid == os.getpgrp()):
            return "unknown"
        if metadata.get("hold") is True and directory is not None and directory.is_dir():
            never = held_back(directory)  # None: its wrapper still waits for `go`
            if never is None:
                return "unknown"
            if never:
                remove_run(directory)
                return "not_started"
        ident = _identity(pid, pid, started) if where == "here" else False
        running = ident is not False and _group_running(pid)
        if directory is None:  # an older launch: its output went to its dead owner
            return "unknown" if running else "stopped"
        status = read_status(directory)  # read after the liveness check: a run that ended counts
        if status is None and not running:
            remove_run(directory)
            return "stopped"
        if status is None and ident is None:
            return "unknown"  # something runs in the group, but is it ours?
        self._watch(_Run(ctx, done, directory, pid, started, _secrets(ctx), group=ident is True))
        return "attached"

    def forget(self, execution_id: str, epoch: int) -> None:
        """The outcome is in the log: remove the attempt's finished run directories."""
        prefix = run_prefix(execution_id)
        try:
            entries = list(self.runs_dir.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith(prefix) and read_status(entry) is not None:
                with self._lock:
                    watched = any(r.directory == entry for r in self._runs.values())
                if not watched:
                    remove_run(entry)

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        recovery = _recovery(metadata)
        if recovery is None:
            return "unknown"
        pid, pgid, started = recovery
        directory = run_of(execution_id, metadata)
        where = _locate(metadata, self._machine, directory)
        if where == "unknown" or (where == "here" and pgid == os.getpgrp()):
            return "unknown"  # never signal the scheduler's own group
        with self._lock:
            own = next((r.proc for r in self._runs.values() if r.proc and r.pid == pid), None)
            watched = execution_id in self._runs
        if own is not None:
            own.poll()  # reap our own zombie so that it stops counting as alive
        ours = (own is not None and own.returncode is None) or _identity(pid, pgid, started)
        evidence: StopEvidence = "stopped"
        if where == "here" and _group_running(pgid):
            evidence = "unknown"
            stopper = _GroupStopper(pgid, self.kill_grace_seconds)
            while ours and stopper.step(time.monotonic()):
                time.sleep(POLL_SECONDS)
                if own is not None:
                    own.poll()
                if not _group_running(pgid):
                    evidence = "stopped"
                    break
        if evidence == "stopped" and directory is not None and not watched:
            remove_run(directory)  # nobody here will report it: the attempt is over
        return evidence

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        with self._lock:
            run = self._runs.get(execution_id)
        if run is None or run.ctx.epoch != epoch or not run.group:
            return False
        if not self._leader_running(run) or read_status(run.directory) is not None:
            return False
        return _signal_group(run.pid, signal.SIGTERM)

    def close(self) -> None:
        """Stop every process this executor launched (SIGTERM, SIGKILL after the grace) and
        join; adopted runs are only no longer watched (the next recovery finds them)."""
        self._closed.set()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(self.kill_grace_seconds + KILL_WAIT_SECONDS + 1)
