"""The shell executor: runs one attempt as a command in its own process group.

This module holds its contract and the executor; its parts live beside it: `shell_config`
(config and environment), `shell_wrapper` (the group leader), `shell_runs` (the run
directory), `shell_processes` (groups, signals, where a pid means something),
`shell_supervision` (watching a run) and `shell_result` (exit status and output to Result).

Config (`ctx.config`; errors raise `InvalidExecutorConfig` naming the field, before anything
starts: `validate_config` checks a binding when it is loaded or defined, `launch` again)
  command      list of str, required. A string is refused: a list avoids shell-quoting
               surprises, and `["sh", "-c", "..."]` runs a shell line.
  cwd          optional working directory; it must exist at launch (a launch whose `cwd`
               is gone fails permanently, `invalid_config`).
  environment  optional object of str -> str.
  launch_phases  optional list: ["executor"] records the `executor` launch phase around the
               launch (two fenced events more a launch); [] or absent records none, and a
               launch writes one fenced event, its recovery metadata.
  Unknown keys are refused, so a misspelt key fails when the binding is loaded instead of
  being ignored.

Environment and input
  PATH, HOME, LANG and TMPDIR are inherited; then come `environment`, `ctx.env` (secrets and
  the run environment: written nowhere but the child's environment) and ROTA_WORK_ID,
  ROTA_EXECUTION_ID, ROTA_ATTEMPT, ROTA_EPOCH and ROTA_INPUT (the JSON list of input payloads);
  with tracing on (rota[otel]), TRACEPARENT (and TRACESTATE) name the attempt's span.
  The same JSON is the command's stdin: a pipe that holds it whole (its write end closed,
  so the command reads it to its end with or without the daemon) up to 4 KiB, else the
  file `input.json` in the run directory. ROTA_INPUT is left out above 96 KiB (the kernel
  caps one variable at 128 KiB); stdin always carries it.

Run directory: nothing of a run depends on the daemon that launched it staying alive
  Each launch gets `runs_dir/<execution id, / as _>-e<epoch>-<8 hex>/` (mode 0700; `runs_dir`
  defaults to `<tempdir>/rota-runs-<uid>`, created 0700; it must be ours and writable by no
  one else) holding `stdout` and `stderr` (files, not pipes: a dead daemon cannot SIGPIPE
  the command), `input.json` for an input over 4 KiB, `go` once the launch is pinned (its
  time is when the command was let go) and, once the command ended, `status`: its exit
  code, -N when
  killed by signal N. A tiny wrapper leads the group (a fork of the executor's spawner, a
  small long-lived Python process started on the first launch: no interpreter is started
  per run, nothing is compiled and nothing runs from a temporary directory; see
  `shell_spawner`): it holds an flock on the run directory, holds the command back
  until the launch is pinned (below), starts it with its argv, environment, cwd and
  standard streams unchanged (a start failure, such as no such program, still makes `launch`
  raise), waits, writes `status` (atomically, by absolute path) and exits. It blocks
  SIGTERM, SIGINT and SIGHUP, which the
  command gets at their default, so that it records a command they stopped.
  The directory is removed once the result was reported, the outcome is in the log (the
  host's `forget`, which hands the removal to the executor's one cleaner thread) and the
  group is gone, or when recovery or `stop` finds the run over. A daemon that crashed
  leaves its run directories behind until recovery reports their result (or `stop`
  verifies the run stopped). On disk the output files are not bounded: only what is read
  of them is.

Isolation: nothing runs until the launch is pinned (`isolates = True`)
  The host marks the invoke `isolated`, so an attempt whose launch lost its lease before it
  pinned anything is relaunched, not adopted (rota.domain.recovery). That holds because the
  wrapper starts nothing until the file `go` appears in its run directory, and `launch`
  creates `go` (atomically) only after `ctx.persist_recovery` succeeded. A wrapper whose
  launching process dies first (the spawner, its parent, exits with it, so its parent pid
  changes, polled every 250 ms at most; or the wake pipe from the launcher reaches its end,
  which it sees at once)
  or that waited `hold_seconds` (default 30) creates `abandoned` and exits (code 125)
  without starting the command or writing `status`.
  The `executor` launch phase, when the binding declares it, covers all of it: run
  directory, wrapper, persist, `go` and the wrapper's report that the command started.
  `launch_many` does the same for a batch side by side (`shell_launch`): every wrapper
  asked for, one `persist` pinning every launch's metadata, every wrapper let go.

Process groups
  The wrapper is forked into a new session, so it leads its own group (pgid == pid).
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
  (units ^[a-z][a-z0-9_]{0,31}$ other than turns, attempts and minutes; finite amounts >= 0),
  and `artifacts`, references {"name", "uri", "digest", "size"} kept with the outcome
  (rota.domain.artifacts). An unsound line gives "invalid_result".

Untrusted output
  Only the last `capture_bytes` of each file are read; data holds the last 4096 characters of
  each, decoded as UTF-8 with errors replaced. `ctx.env` values of 6 or more characters are
  replaced by "[redacted]" in tails and messages; rota.result data or artifacts holding one
  are refused.
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

import os
import signal
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rota.application.errors import ExecutorError
from rota.application.ports import (
    Done,
    Executor,
    Launch,
    LaunchContext,
    PersistMany,
    Recovery,
    StopEvidence,
    persist_each,
)
from rota.domain.results import Result
from rota.infrastructure.executors.shell_config import (
    check_config,
    run_secrets,
)
from rota.infrastructure.executors.shell_launch import Starting, launch_batch, spawn
from rota.infrastructure.executors.shell_processes import (
    KILL_WAIT_SECONDS,
    POLL_SECONDS,
    GroupStopper,
    group_identity,
    group_running,
    locate,
    machine,
    recorded_ids,
    signal_group,
)
from rota.infrastructure.executors.shell_runs import (
    Cleaner,
    held_back,
    make_run,
    read_status,
    remove_run,
    run_of,
    run_prefix,
)
from rota.infrastructure.executors.shell_spawner import Spawner
from rota.infrastructure.executors.shell_supervision import (
    Reaper,
    Run,
    ended_result,
    leader_running,
    supervise,
)
from rota.infrastructure.executors.shell_wrapper import HOLD_SECONDS


class ShellExecutor(Executor):
    """Runs `config.command` as a child process group and reports how it ended."""

    name = "shell"
    pool = "jobs"
    capabilities = frozenset({"stop", "interrupt", "recover"})
    stable = True
    isolates = True  # the wrapper starts nothing until the launch is pinned (`go`)
    batch_launch = True  # bounded: `launch_many` serves a pass's launches as one task
    quick_forget = True  # `forget` hands the run directory's removal to the cleaner

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
        self._machine = machine()
        self._runs: dict[str, Run] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._spawner = Spawner()  # started on the first launch
        self._reaper = Reaper(self._closed, self._ended, self._thread_for)
        self._reported: dict[str, list[Path]] = {}  # run directories whose result we reported
        self._cleaner = Cleaner()  # removes forgotten runs' directories, in order
        self._root_checked = False  # `runs_dir` passed make_run's checks once

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> None:
        """`command` a non-empty list of strings, `cwd` a path, `environment` strings to
        strings, no other key; at launch `cwd` must also exist."""
        check_config(config)

    def launch(self, ctx: LaunchContext, done: Done) -> None:
        item = Launch(ctx, done)
        self.launch_many([item], persist_each)
        if item.error is not None:
            raise item.error

    def launch_many(self, launches: Sequence[Launch], persist: PersistMany) -> None:
        """Launch a batch side by side (see "Batched launches" and `shell_launch`)."""
        launch_batch(launches, persist, self._spawn, self._machine, self._watch)

    def _spawn(self, item: Launch) -> Starting:
        """Check a launch, make its run directory and ask the spawner for its wrapper."""
        if self._closed.is_set():
            raise ExecutorError("the shell executor is closed")
        return spawn(item, self._make_run, self._spawner, self.hold_seconds)

    def _make_run(self, execution_id: str, epoch: int) -> Path:
        directory = make_run(self.runs_dir, execution_id, epoch, self._root_checked)
        self._root_checked = True  # `runs_dir` is ours, and only we may write to it
        return directory

    def _watch(self, run: Run) -> None:
        """Watch a run to its end: by the reaper if it was launched here, else (or if the
        reaper cannot) on a thread of its own."""
        with self._lock:
            self._runs[run.ctx.execution_id] = run
        if not self._reaper.add(run):
            self._thread_for(run)

    def _thread_for(self, run: Run) -> None:
        thread = threading.Thread(
            target=self._follow, args=(run,), name=f"rota-shell-{run.pid}", daemon=True
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _ended(self, run: Run) -> None:
        """The reaper saw the run's wrapper exit: report it here if it ended cleanly."""
        try:
            result = ended_result(run, self.capture_bytes)
        except Exception:
            result = None
        if result is None:
            self._thread_for(run)  # something is left to stop, or to look at more closely
        else:
            self._report(run, result)

    def _follow(self, run: Run) -> None:
        """Supervise one run to its end, then call its `done` exactly once."""
        result: Result | None = None
        try:
            result = supervise(run, self._closed, self.kill_grace_seconds, self.capture_bytes)
        except Exception:
            if run.group and group_identity(run.pid, run.pid, run.started):
                signal_group(run.pid, signal.SIGKILL)
            message = "the shell executor failed while supervising the process"
            result = Result(outcome="failed", error_code="executor_error", error_message=message)
        finally:
            self._report(run, result)

    def _report(self, run: Run, result: Result | None) -> None:
        """Stop watching the run and call its `done` (None: closed, left running)."""
        with self._lock:
            if self._runs.get(run.ctx.execution_id) is run:
                del self._runs[run.ctx.execution_id]
            done = run.done  # `recover` may have handed the run a newer callback
        if result is None:
            return  # closed: an adopted run keeps running and is no longer watched
        with self._lock:
            self._reported.setdefault(run.ctx.execution_id, []).append(run.directory)
        done(result)
        # The run directory stays until `forget`: the host has only queued the result in
        # memory, and if it dies before the outcome is appended, recovery reads it here.

    def recover(self, ctx: LaunchContext, metadata: Any, done: Done) -> Recovery:
        if self._closed.is_set() or ctx.deadline.tzinfo is None:
            return "unknown"
        ids = recorded_ids(metadata)
        if ids is None or ids[0] != ids[1]:
            return "unknown"
        pid, _, started = ids
        directory = run_of(ctx.execution_id, metadata)
        with self._lock:  # still watched here (the lease was lost, not the process)
            run = self._runs.get(ctx.execution_id)
            if run is not None and run.pid == pid and run.directory == directory:
                run.ctx, run.done = ctx, done
                run.secrets = tuple(sorted({*run.secrets, *run_secrets(ctx)}, key=len)[::-1])
                return "attached"
        where = locate(metadata, self._machine, directory)
        if where == "unknown" or (where == "here" and pid == os.getpgrp()):
            return "unknown"
        if metadata.get("hold") is True and directory is not None and directory.is_dir():
            never = held_back(directory)  # None: its wrapper still waits for `go`
            if never is None:
                return "unknown"
            if never:
                remove_run(directory)
                return "not_started"
        ident = group_identity(pid, pid, started) if where == "here" else False
        running = ident is not False and group_running(pid)
        if directory is None:  # an older launch: its output went to its dead owner
            return "unknown" if running else "stopped"
        status = read_status(directory)  # read after the liveness check: a run that ended counts
        if status is None and not running:
            remove_run(directory)
            return "stopped"
        if status is None and ident is None:
            return "unknown"  # something runs in the group, but is it ours?
        self._watch(Run(ctx, done, directory, pid, started, run_secrets(ctx), group=ident is True))
        return "attached"

    def forget(self, execution_id: str, epoch: int) -> None:
        """The outcome is in the log: the attempt's finished run directories go, on the
        cleaner's thread (`quick_forget`: nothing here blocks the host's loop)."""
        self._cleaner.put(lambda: self._remove_finished(execution_id))

    def _remove_finished(self, execution_id: str) -> None:
        prefix = run_prefix(execution_id)
        with self._lock:
            known = self._reported.pop(execution_id, None)
        try:  # the runs this executor reported; else (reported before a restart) look
            entries = known if known is not None else list(self.runs_dir.iterdir())
        except OSError:
            return
        for entry in entries:
            # A run this executor reported has ended (its status was read to report it).
            if entry.name.startswith(prefix) and (known or read_status(entry) is not None):
                with self._lock:
                    watched = any(r.directory == entry for r in self._runs.values())
                if not watched:
                    remove_run(entry, ended=known is not None)

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> StopEvidence:
        recovery = recorded_ids(metadata)
        if recovery is None:
            return "unknown"
        pid, pgid, started = recovery
        directory = run_of(execution_id, metadata)
        where = locate(metadata, self._machine, directory)
        if where == "unknown" or (where == "here" and pgid == os.getpgrp()):
            return "unknown"  # never signal the scheduler's own group
        with self._lock:
            own = next((r.proc for r in self._runs.values() if r.proc and r.pid == pid), None)
            watched = execution_id in self._runs
        if own is not None:
            own.poll()  # reap our own zombie so that it stops counting as alive
        ours = (own is not None and own.returncode is None) or group_identity(pid, pgid, started)
        evidence: StopEvidence = "stopped"
        if where == "here" and group_running(pgid):
            evidence = "unknown"
            stopper = GroupStopper(pgid, self.kill_grace_seconds)
            while ours and stopper.step(time.monotonic()):
                time.sleep(POLL_SECONDS)
                if own is not None:
                    own.poll()
                if not group_running(pgid):
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
        if not leader_running(run) or read_status(run.directory) is not None:
            return False
        return signal_group(run.pid, signal.SIGTERM)

    def detach(self) -> None:
        """A graceful stop: stop watching every run and leave its process group running.

        Its run directory stays, so the next host's recovery adopts it (and, once it has
        ended, reads its status): a restart neither kills a job nor charges it a failure."""
        with self._lock:
            for run in self._runs.values():
                run.proc = None  # watched as adopted from now on: closing leaves it running
        self.close()

    def close(self) -> None:
        """Stop every process this executor launched (SIGTERM, SIGKILL after the grace) and
        join; adopted runs are only no longer watched (the next recovery finds them)."""
        self._closed.set()
        self._reaper.wake()  # it hands every run it watches to a thread of its own
        self._reaper.join(self.kill_grace_seconds + KILL_WAIT_SECONDS + 1)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(self.kill_grace_seconds + KILL_WAIT_SECONDS + 1)
        self._cleaner.close(KILL_WAIT_SECONDS + 1)  # a `forget` after this removes at once
        self._spawner.close()
