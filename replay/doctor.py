"""`rota doctor`: a strictly read-only health report of a store and its projection file.

Every check is a function returning a `Check(name, status, detail, advice)`; `status` is
`ok`, `warn` or `fail`, and `advice` says exactly what to run. The report is `ok` unless a
check fails (a warning needs a look, not a restore). The checks, in order:

`log_integrity` (the backend's `check_integrity`: on SQLite a full `PRAGMA
integrity_check` of the log file), `hash_chain`
(`verify_chain`), `checkpoint` (the log must extend this store's newest checkpoint in `[audit]
checkpoint_dir`; behind it, its tail was lost; another store's, as after an import, are
told apart: `log_checks.check_checkpoint`), `projection_integrity` (the projection
file's `PRAGMA integrity_check`), `projection_drift` (every stored row, byte for byte and
decoded, against a replay of the log to the projection's position), `projection_lag`
(warn beyond `lag_threshold` events), `expired_leases` (warn: live attempts whose lease
expired by the store's clock more than one lease ago), `overdue_timers` (warn: retry
timers due more than a minute ago), `capacity` (each pool's running attempts against its
limit and the Work the limit holds back; warn when over), `budgets`, `crash_loop` and
`recovery_exhausted` (warn: held Work with the reason), `retention_overdue` (warn:
payloads over a day past a `[[retention]]` policy: `retention_checks`), then the schedule checks of
`schedule_checks`:
`schedule_accounting` (every nominal time fired or skipped exactly once),
`schedule_drift` (the schedules projection agrees with that walk) and
`schedule_quarantine` (fails on a quarantined schedule, saying how to release it) and
`schedule_health` (fails on a stuck or quarantined schedule: the read the Schedules page,
`/readyz` and `/metrics` show, `rota.application.queries.schedule_health`). Any
fail of the first three means the log itself is damaged: the advice is a full restore,
never recover-corrupt. This module runs them in that order (`examine`); they live in
`log_checks`, `projection_checks`, `state_checks` and `schedule_checks`, the report's
types in `doctor_report`, the read-only openers in `read_only`.

On PostgreSQL the projections are tables in the log's schema: `log_integrity` has no file
to check (ok, "not applicable"; `hash_chain` reads every event), `projection_integrity`
checks that the tables are there and reads every row of them (the server checks its own
pages), and every other check is the same. The projection tables are read in a session
whose transactions are read-only (`default_transaction_read_only`).

Read-only: the log and the projection file are opened with `SQLITE_OPEN_READONLY`, never
through a writer. A file with no `-wal`/`-shm` beside it is open nowhere (a WAL connection
always keeps its `-shm`), so it is read with `immutable=1`, which creates no companion
file. If a writer opens it while doctor reads (the file, or its companions, change), the
whole report is taken again with ordinary read-only connections (which, like any WAL
reader, share the writer's `-wal`/`-shm`). Nothing is ever written to either file.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import msgspec

from rota.application.errors import StoreError
from rota.application.ports import Clock, EventStore, ProjectionStore
from rota.domain.events import RetentionPolicy
from rota.domain.policy import Binding, Settings
from rota.infrastructure.backend import Backend
from rota.infrastructure.projection_stores import open_projection_store
from rota.infrastructure.spill import SpillFile
from rota.infrastructure.sqlite.projection_store import default_path
from rota.infrastructure.store_url import backend
from rota.projections import PERSISTED, SchedulerProjection
from rota.replay.doctor_report import FULL_RESTORE, Check, DoctorReport, guarded, recover_advice
from rota.replay.log_checks import check_chain, check_checkpoint, check_log_integrity
from rota.replay.progress import ProgressFactory, silent
from rota.replay.projection_checks import (
    check_drift,
    check_lag,
    check_projection_integrity,
    stored_rows,
)
from rota.replay.read_only import ReadOnlyLog, ReadOnlyProjections, fingerprint, quiescent
from rota.replay.rebuild import fold_spilling
from rota.replay.retention_checks import check_retention
from rota.replay.row_streams import SchedulerReading, opened, read_scheduler
from rota.replay.schedule_checks import SCHEDULE_CHECKS, schedule_checks
from rota.replay.state_checks import (
    BUDGET_ADVICE,
    CRASH_LOOP_ADVICE,
    RECOVERY_ADVICE,
    check_capacity,
    check_holds,
    check_leases,
    check_timers,
)

LAG_WARN = 10_000  # events: twice the live projections' save interval


@contextmanager
def _opened(
    path: Path | ProjectionStore | None, immutable: bool
) -> Iterator[ProjectionStore | None]:
    if isinstance(path, ProjectionStore):  # PostgreSQL tables: the caller closes the store
        try:
            there = bool(path.exists())  # type: ignore[attr-defined]
        except StoreError:  # projection_integrity has said why
            there = False
        yield path if there else None
        return
    ro = None
    if path is not None and path.exists():
        try:
            ro = ReadOnlyProjections(path, immutable=immutable)
        except apsw.Error:
            ro = None
    try:
        yield ro
    finally:
        if ro is not None:
            ro.close()


STATE_CHECKS = (
    "projection_drift",
    "projection_lag",
    "expired_leases",
    "overdue_timers",
    "capacity",
    "budgets",
    "crash_loop",
    "recovery_exhausted",
    "retention_overdue",
    *SCHEDULE_CHECKS,
)
READ_ERRORS = (apsw.Error, StoreError, msgspec.MsgspecError, KeyError, ValueError)


def _projection_checks(
    log: EventStore,
    path: Path | ProjectionStore | None,
    immutable: bool,
    lag_threshold: int,
    progress: ProgressFactory = silent,
) -> tuple[list[Check], SchedulerReading]:
    """Drift and lag of the projection file, and the scheduler state at the head: the log
    is folded once, each fresh projection up to its stored copy's position.

    In memory bounded by the active Works: the stored rows stream in key order (one
    snapshot, held to the end), every fold spills as a rebuild's does (a scratch file each),
    and the state at the head is what the checks read of it: its active and held Works,
    every other field, and each distinct pinned binding (`rota.replay.row_streams`). When
    the stored scheduler projection is at the head, its fresh fold is that state."""
    head = log.head().position
    with contextlib.ExitStack() as stack:
        ro = stack.enter_context(_opened(path, immutable))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rota-doctor-")))
        stored: dict[str, Any] = {}
        unreadable = None
        if ro is not None:
            try:
                stack.enter_context(ro.snapshot())
                stored = {kind.name: stored_rows(ro, kind, log) for kind in PERSISTED}
            except READ_ERRORS as exc:
                unreadable = f"the projection file cannot be read: {type(exc).__name__}: {exc}"
        # Only the projections a comparison reads are folded (stored and usable).
        compared = [k for k in PERSISTED if k.name in stored and _comparable(stored[k.name])]
        limits = [stored[k.name][0].position for k in compared]
        state = next(
            (
                kind
                for kind, at in zip(compared, limits, strict=True)
                if kind is SchedulerProjection and at == head
            ),
            None,
        )
        kinds, upto = list(compared), list(limits)
        if state is None:  # the state at the head is a fold of its own
            kinds.append(SchedulerProjection)
            upto.append(None)
        folded = _fold_spilling(log, kinds, upto, scratch, progress)
        for spilled in folded:
            stack.callback(spilled.spill.close)
        rows = {kind.name: spilled for kind, spilled in zip(compared, folded, strict=False)}
        state_rows = folded[-1] if state is None else rows["scheduler"]
        with opened(state_rows.spill.items()) as items:
            reading = read_scheduler(state_rows.position, items, trusted=True)
        if unreadable is not None:
            return [
                Check("projection_drift", "fail", unreadable, recover_advice()),
                Check("projection_lag", "warn", "not measured: " + unreadable),
            ], reading
        return [
            guarded("projection_drift", lambda: check_drift(log, ro, rows, stored)),
            guarded("projection_lag", lambda: check_lag(head, stored, lag_threshold)),
        ], reading


def _fold_spilling(
    log: EventStore,
    kinds: list[Any],
    upto: list[int | None],
    scratch: Path,
    progress: ProgressFactory = silent,
) -> list[Any]:
    """Fresh projections of `kinds`, each folded to its `upto` and spilled under `scratch`
    (`SpilledRows`), all from one read of the log (`fold_spilling`)."""
    serial = itertools.count()

    def spill_to(name: str) -> SpillFile:
        # Two folds of one projection (the stored position's and the head's) may run: each
        # spills to a file of its own.
        return SpillFile(scratch / f"{next(serial)}-{name}.spill")

    folded, _ = fold_spilling(
        log, kinds, upto, spill=spill_to, progress=progress, label="doctor: replay"
    )
    return folded


def _comparable(stored: tuple[Any, Any, str | None]) -> bool:
    meta, _, reason = stored
    return meta is not None and reason is None


def projection_health(
    log: EventStore,
    projections: Path | ProjectionStore | None,
    *,
    immutable: bool,
    progress: ProgressFactory = silent,
) -> list[Check]:
    """Doctor's verdict on the stored projections alone: `projection_integrity` and
    `projection_drift`, as `examine` finds them (what recover-corrupt asks before it
    isolates anything: a healthy projection store is refused without `--force`)."""
    checks = [
        guarded("projection_integrity", lambda: check_projection_integrity(projections, immutable))
    ]
    try:
        found, _ = _projection_checks(log, projections, immutable, LAG_WARN, progress)
    except READ_ERRORS as exc:  # the log itself cannot be folded
        why = f"the log cannot be folded: {type(exc).__name__}: {exc}"
        return [*checks, Check("projection_drift", "fail", why, FULL_RESTORE)]
    return checks + [c for c in found if c.name == "projection_drift"]


def examine(
    log: EventStore,
    projections: Path | ProjectionStore | None,
    *,
    store: Backend,
    immutable: bool,
    checkpoint_dir: str | os.PathLike[str] | None,
    settings: Settings,
    bindings: Mapping[str, Binding],
    lag_threshold: int = LAG_WARN,
    progress: ProgressFactory = silent,
    retention: Sequence[RetentionPolicy] = (),
) -> DoctorReport:
    """Every check on an opened (read-only) log of the store `store` opens (whose
    `check_integrity` is `log_integrity`); see the module docstring."""
    from rota.application.configuration import Configuration
    from rota.application.queries.capacity import capacity_view
    from rota.infrastructure.executors import builtin_registrations

    checks = [guarded("log_integrity", lambda: check_log_integrity(store, immutable))]
    checks.append(guarded("hash_chain", lambda: check_chain(log, progress)))
    checks.append(guarded("checkpoint", lambda: check_checkpoint(log, checkpoint_dir)))
    checks.append(
        guarded("projection_integrity", lambda: check_projection_integrity(projections, immutable))
    )
    try:
        found, reading = _projection_checks(log, projections, immutable, lag_threshold, progress)
    except READ_ERRORS as exc:  # the log itself cannot be folded
        why = f"the log cannot be folded: {type(exc).__name__}: {exc}"
        checks.extend(Check(name, "fail", why, FULL_RESTORE) for name in STATE_CHECKS)
        return DoctorReport(ok=False, checks=checks)
    checks.extend(found)
    now = log.now()
    state = reading.projection
    # What the log pinned (in-process executors included), then the configuration's: every
    # distinct pinned binding, then those of the active and held Works (named last, so they
    # win where two pinned bindings share a name).
    pinned = [*reading.pinned, *(a.pinned for w in state.works.values() for a in w.attempts)]
    registrations = {p.registration.name: p.registration for p in pinned}
    registrations.update(builtin_registrations())
    known = {p.binding.name: p.binding for p in pinned} | dict(bindings)
    configuration = Configuration(
        settings=settings, owner="doctor", bindings=known, registrations=registrations
    )
    checks.append(guarded("expired_leases", lambda: check_leases(state, now)))
    checks.append(guarded("overdue_timers", lambda: check_timers(state, now)))
    checks.append(
        guarded("capacity", lambda: check_capacity(capacity_view(state, configuration, now)))
    )
    checks.append(check_holds(state, "budget", "budgets", BUDGET_ADVICE))
    checks.append(check_holds(state, "crash_loop", "crash_loop", CRASH_LOOP_ADVICE))
    checks.append(check_holds(state, "recovery_exhausted", "recovery_exhausted", RECOVERY_ADVICE))
    checks.append(guarded("retention_overdue", lambda: check_retention(log, retention, now)))
    try:
        checks.extend(schedule_checks(log, state.works))
    except READ_ERRORS as exc:
        why = f"the schedule streams cannot be read: {type(exc).__name__}: {exc}"
        checks.extend(Check(name, "fail", why, FULL_RESTORE) for name in SCHEDULE_CHECKS)
    return DoctorReport(ok=all(c.status != "fail" for c in checks), checks=checks)


def doctor(
    url: str,
    *,
    projections: str | os.PathLike[str] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
    bindings: Mapping[str, Binding] | None = None,
    clock: Clock | None = None,
    lag_threshold: int = LAG_WARN,
    progress: ProgressFactory = silent,
    retention: Sequence[RetentionPolicy] = (),
) -> DoctorReport:
    """The doctor's report on the store `url` names (read-only; see the module docstring);
    `progress` makes the bars of its long steps (the hash chain, the replay)."""
    options: dict[str, Any] = {
        "checkpoint_dir": checkpoint_dir,
        "settings": settings or Settings(),
        "bindings": bindings or {},
        "lag_threshold": lag_threshold,
        "progress": progress,
        "retention": retention,
    }
    found = backend(url)
    path = found.log_file
    if path is None:
        return _doctor_opened(found, projections, clock, options)
    proj = Path(projections) if projections is not None else default_path(path)
    if not path.is_file():
        missing = Check("log_integrity", "fail", f"no log file at {path}", "check --store")
        return DoctorReport(ok=False, checks=[missing])
    files = [p for p in (path, proj) if p is not None]
    for attempt in range(2):
        before = [fingerprint(p) for p in files]
        calm = attempt == 0 and all(quiescent(p) for p in files)
        with ReadOnlyLog(path, immutable=calm, clock=clock) as log:
            report = examine(log, proj, store=found, immutable=calm, **options)
        if not calm or before == [fingerprint(p) for p in files]:
            return report
        # A writer opened a file while it was read as immutable: read again, shared.
    return report


def _doctor_opened(
    found: Backend,
    projections: str | os.PathLike[str] | None,
    clock: Clock | None,
    options: dict[str, Any],
) -> DoctorReport:
    """The report on a log that is not one file (PostgreSQL, memory), opened through its
    backend; its projections are the backend's (a PostgreSQL schema's tables, read in a
    read-only session) unless `--projections` names a file."""
    with found.open_log(clock=clock) as log:
        named = backend(projections).log_file if projections is not None else None
        if named is not None:
            return examine(log, named, store=found, immutable=False, **options)
        tables = open_projection_store(log, projections, read_only=True)
        try:
            return examine(log, tables, store=found, immutable=False, **options)
        finally:
            if tables is not None:
                tables.close()


__all__ = ["LAG_WARN", "Check", "DoctorReport", "doctor", "examine", "projection_health"]
