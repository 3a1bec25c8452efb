"""Optimisation: a batch of shell launches pins its recovery metadata in one fenced append
(one durability wait for the batch, not one a launch in turn), on one thread of the host's
launch pool rather than a thread a launch (bench shell).

Measured in bench/RESULTS.md, "2026-12-08, shell: a launch without sequential durable waits".

How a batch of shell launches goes (`ShellExecutor.launch_many`, and `launch` for one):
every wrapper is asked of the spawner first (`spawn`: the launch's checks, its run
directory, the request), then each wrapper's first report is read (it holds its run
directory's lock and its command back), every launch's recovery metadata is pinned by
one `persist` (the host's: one fenced append), every pinned wrapper is let go (`go`, then
its wake pipe), and only then each one's start report read. A large batch goes up to its
pins CHUNK launches at a time, so that its first wrappers are not held back while its
last ones are asked for. The wrappers
start and report side by side; a launch of the batch that fails at any step fails alone:
its group is killed (it started nothing: no `go`), its run directory removed, and its
`Launch.error` is what `launch` would have raised. The `executor` launch phase is recorded
around all of it only when the binding declares it (`launch_phases = ["executor"]`): a
binding that declares none writes one fenced event between its claim and its outcome,
`RecoveryPersisted`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from rota.application.errors import ExecutorError
from rota.application.ports import Launch, PersistMany
from rota.infrastructure.executors.shell_config import (
    parse_config,
    run_environment,
    run_secrets,
    variables_ok,
)
from rota.infrastructure.executors.shell_processes import kill_group, proc_stat
from rota.infrastructure.executors.shell_runs import remove_run
from rota.infrastructure.executors.shell_spawner import Spawner
from rota.infrastructure.executors.shell_supervision import Run
from rota.infrastructure.executors.shell_wrapper import Spawned, Wrapper, spawn_wrapper

CHUNK = 16  # launches of a batch pinned by one append (a batch of 64 waits for 4 in turn)


class Starting:
    """One launch of a batch on its way (see the module docstring)."""

    def __init__(self, item: Launch, phases: bool) -> None:
        self.item = item
        self.phases = phases  # the binding declared the `executor` launch phase
        self.directory: Path | None = None
        self.spawned: Spawned | None = None
        self.wrapper: Wrapper | None = None
        self.pid_started: int | None = None

    def held(self) -> None:
        """Read the wrapper's first report (it holds its lock and its command back)."""
        assert self.spawned is not None
        self.wrapper = self.spawned.held()

    def metadata(self, machine: dict[str, Any]) -> dict[str, Any]:
        """The recovery metadata to pin (the wrapper holds its command back: `hold`)."""
        wrapper = self.wrapper
        assert wrapper is not None
        pid = wrapper.pid
        started = wrapper.proc.started  # read by the wrapper itself
        if started is None:
            stat = proc_stat(pid)
            started = stat[2] if stat else None
        self.pid_started = started
        run = str(self.directory)
        return {"pid": pid, "pgid": pid, "started": started, "run": run, "hold": True, **machine}

    def started(self) -> None:
        """Read the wrapper's start report (after `let_go`); ExecutorError if the command
        did not start."""
        wrapper = self.wrapper
        assert wrapper is not None
        try:
            wrapper.started()
        finally:
            wrapper.close()
        if self.phases:
            self.item.ctx.record_phase("executor", "ok")

    def abort(self, error: BaseException) -> None:
        """The launch failed: nothing of the command runs (no `go`, or it did not start),
        its group is killed, its run directory removed; `error` is what `launch` raises."""
        wrapper = self.wrapper
        if wrapper is not None:
            wrapper.close()  # no `go`: the wrapper started nothing (or failed to)
            kill_group(wrapper.pid)
            wrapper.proc.wait()
        if self.directory is not None:
            remove_run(self.directory)
        if self.phases:
            ctx = self.item.ctx
            ctx.record_phase("executor", "cancelled" if ctx.cancel.is_set() else "failed")
        self.item.error = error


def spawn(
    item: Launch, make_run: Callable[[str, int], Path], spawner: Spawner, hold: float
) -> Starting:
    """Check the launch (raising what `launch` raises), make its run directory (`make_run`)
    and ask the spawner for its wrapper, without waiting for it."""
    ctx = item.ctx
    command, cwd, extra, phases = parse_config(ctx.config)
    if not variables_ok(ctx.env):
        raise ExecutorError("ctx.env must map variable names to strings without NUL")
    if ctx.deadline.tzinfo is None:
        raise ExecutorError("ctx.deadline must be timezone-aware")
    try:
        payload = msgspec.json.encode(ctx.inputs)
    except (TypeError, ValueError, msgspec.EncodeError):
        raise ExecutorError("ctx.inputs cannot be encoded as JSON") from None
    env = run_environment(ctx, extra, payload)
    if phases:
        ctx.record_phase("executor", None)
    one = Starting(item, phases)
    try:
        one.directory = make_run(ctx.execution_id, ctx.epoch)
        one.spawned = spawn_wrapper(spawner, one.directory, command, cwd, env, payload, hold)
    except BaseException as exc:
        one.abort(exc)
        raise
    return one


def launch_batch(
    launches: Sequence[Launch],
    persist: PersistMany,
    begin: Callable[[Launch], Starting],
    machine: dict[str, Any],
    watch: Callable[[Run], None],
) -> None:
    """Launch `launches` side by side (see the module docstring), CHUNK at a time up to
    their pin (so the first wrappers of a large batch are not held while the last are
    asked for); `begin` is `spawn` with the executor's settings, `watch` hands a started
    run to the executor's reaper."""
    released: list[Starting] = []
    for offset in range(0, len(launches), CHUNK):
        released += _pin(launches[offset : offset + CHUNK], persist, begin, machine)
    for one in released:
        try:
            one.started()
        except BaseException as exc:
            one.abort(exc)
            continue
        ctx, wrapper = one.item.ctx, one.wrapper
        assert wrapper is not None and one.directory is not None
        secrets = run_secrets(ctx)
        began = time.monotonic()
        watch(Run(ctx, one.item.done, one.directory, wrapper.pid, one.pid_started, secrets,
                  wrapper.proc, began))  # fmt: skip


def _pin(
    launches: Sequence[Launch],
    persist: PersistMany,
    begin: Callable[[Launch], Starting],
    machine: dict[str, Any],
) -> list[Starting]:
    """Ask for every wrapper, read each one's first report, pin them all with one
    `persist`, and let every pinned one go; the launches let go (the others failed)."""
    starting: list[Starting] = []
    for item in launches:
        try:
            starting.append(begin(item))
        except BaseException as exc:
            item.error = exc
    holding: list[Starting] = []
    for one in starting:
        try:
            one.held()
        except BaseException as exc:
            one.abort(exc)
            continue
        holding.append(one)
    answers = persist([(one.item.ctx, one.metadata(machine)) for one in holding])
    released: list[Starting] = []
    for one, answer in zip(holding, answers, strict=True):
        try:
            if answer is not None:
                raise answer
            assert one.wrapper is not None
            one.wrapper.let_go()  # pinned: only now may the command start
        except BaseException as exc:
            one.abort(exc)
            continue
        released.append(one)
    return released
