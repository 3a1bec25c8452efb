"""`rota doctor`: a strictly read-only health report of a store and its projection file.

Every check is a function returning a `Check(name, status, detail, advice)`; `status` is
`ok`, `warn` or `fail`, and `advice` says exactly what to run. The report is `ok` unless a
check fails (a warning needs a look, not a restore). The checks, in order:

`log_integrity` (full `PRAGMA integrity_check` of the log file), `hash_chain`
(`verify_chain`), `checkpoint` (the log must extend the newest checkpoint of `[audit]
checkpoint_dir`; behind it, its tail was lost), `projection_integrity` (the projection
file's `PRAGMA integrity_check`), `projection_drift` (every stored row, byte for byte and
decoded, against a replay of the log to the projection's position), `projection_lag`
(warn beyond `lag_threshold` events), `expired_leases` (warn: live attempts whose lease
expired by the store's clock more than one lease ago), `overdue_timers` (warn: retry
timers due more than a minute ago), `capacity` (each pool's running attempts against its
limit and the Work the limit holds back; warn when over), `budgets` and `crash_loop`
(warn: held Work with the reason). Any fail of the first three means the log itself is
damaged: the advice is a full restore, never recover-corrupt.

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

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import apsw
import msgspec

from rota.application.errors import PortCode, StoreError
from rota.application.ports import Clock, EventStore, ProjectionStore
from rota.application.timestamps import format_timestamp
from rota.domain.policy import Binding, Settings
from rota.domain.recovery import needs_recovery
from rota.infrastructure.clock import SystemClock
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.projection_stores import is_postgres, open_projection_store
from rota.infrastructure.projection_tables import ROW_TABLES
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore, default_path
from rota.infrastructure.sqlite.store import SQLiteStore, sqlite_path
from rota.projections import PERSISTED, SchedulerProjection
from rota.replay import checkpoint as checkpoints
from rota.replay.audit import check_extends, verify_chain
from rota.replay.errors import ReplayCode
from rota.replay.rebuild import first_difference, fold

LAG_WARN = 10_000  # events: twice the live projections' save interval
OVERDUE = timedelta(minutes=1)
COMPANIONS = ("-wal", "-shm", "-journal")
BUDGET_ADVICE = "raise the budget ([[budgets]]) or wait for its window, then 'rota release WORK'"
CRASH_LOOP_ADVICE = (
    "find why it loses its lease before starting ('rota explain WORK'), fix that, then "
    "'rota release WORK'"
)
FULL_RESTORE = (
    "the log is the only authority and cannot be rebuilt: stop every scheduler, keep the "
    "damaged files, restore a full backup of the store (docs/runbook-corruption.md); do "
    "not run recover-corrupt"
)


Status = Literal["ok", "warn", "fail"]


class Check(msgspec.Struct):
    name: str
    status: Status
    detail: str
    advice: str = ""


class DoctorReport(msgspec.Struct):
    ok: bool
    checks: list[Check]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


def recover_advice(when: datetime | None = None) -> str:
    day = (when or datetime.now(UTC)).strftime("%Y%m%d")
    return (
        f"stop 'rota run', then 'rota recover-corrupt --backup-name projections-{day} "
        "--dry-run' and the same without --dry-run: it isolates the projection file and "
        "rebuilds every projection from the log"
    )


# -- read-only access ------------------------------------------------------------------


def quiescent(path: Path) -> bool:
    """No `-wal`, `-shm` or `-journal` beside the file: no connection has it open now."""
    return not any(os.path.lexists(f"{path}{suffix}") for suffix in COMPANIONS)


def fingerprint(path: Path) -> tuple[Any, ...]:
    """What changes when anyone writes the file or opens it in WAL mode."""
    found: list[Any] = []
    for suffix in ("", *COMPANIONS):
        try:
            st = os.lstat(f"{path}{suffix}")
        except FileNotFoundError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


def connect_readonly(path: Path, *, immutable: bool) -> apsw.Connection:
    """A connection that cannot write the file (`immutable`: nor create its companions)."""
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.setbusytimeout(30_000)
    return conn


def integrity(path: Path, *, immutable: bool) -> list[str]:
    """SQLite's full `PRAGMA integrity_check` (`["ok"]` when sound)."""
    try:
        conn = connect_readonly(path, immutable=immutable)
        try:
            return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        finally:
            conn.close()
    except apsw.Error as exc:
        return [f"cannot be read as a database: {exc}"]


class ReadOnlyLog(SQLiteStore):
    """The SQLite log through read-only connections: reads work, any write raises."""

    def __init__(self, path: Path, *, immutable: bool, clock: Clock | None = None) -> None:
        # SQLiteStore.__init__ opens a writer and creates the schema: set up by hand.
        self.path, self.url, self.immutable = Path(path), f"sqlite://{path}", immutable
        self.clock, self.codec, self.synchronous = clock or SystemClock(), DEFAULT_CODEC, "full"
        self._busy_ms, self._pid, self._closed = 30_000, os.getpid(), False
        self._write_lock, self._commit = threading.RLock(), threading.Condition()
        self._local, self._data_version, self._head = threading.local(), None, None
        self._versions: dict[str, int] = {}
        self._connections: list[apsw.Connection] = []
        self._connections_lock = threading.Lock()
        if not self.path.is_file():
            raise StoreError(f"no log file at {self.path}", code=ReplayCode.NO_STORE)

    def _connect(self) -> apsw.Connection:
        conn = connect_readonly(self.path, immutable=self.immutable)
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    def write(self, body: Callable[[apsw.Cursor], Any]) -> Any:
        raise StoreError(f"{self.path} is open read-only", code=PortCode.READ_ONLY)


class ReadOnlyProjections(SQLiteProjectionStore):
    """A projection file through one read-only connection (`rows`, `meta`, `refusal`)."""

    def __init__(self, path: Path, *, immutable: bool) -> None:
        # ProjectionStore.__init__ creates the schema in WAL mode: set up by hand.
        self.path, self.clock, self.last_refusal = Path(path), SystemClock(), None
        self._lock, self._generations, self._closed = threading.RLock(), {}, False
        self._conn = connect_readonly(self.path, immutable=immutable)

    def tables(self) -> set[str]:
        found = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {str(row[0]) for row in found}


# -- the log ---------------------------------------------------------------------------


def check_log_integrity(path: Path, immutable: bool) -> Check:
    lines = integrity(path, immutable=immutable)
    if lines == ["ok"]:
        return Check("log_integrity", "ok", f"PRAGMA integrity_check of {path}: ok")
    shown = "; ".join(lines[:3]) + (f" (and {len(lines) - 3} more)" if len(lines) > 3 else "")
    return Check("log_integrity", "fail", f"{path}: {shown}", FULL_RESTORE)


def check_chain(log: EventStore) -> Check:
    report = verify_chain(log)
    if report.ok:
        detail = f"{report.checked} events chained, head {report.head_position} "
        return Check("hash_chain", "ok", detail + report.head_hash[:16])
    detail = f"first bad position {report.first_bad_position}: {report.reason}"
    return Check("hash_chain", "fail", detail, FULL_RESTORE)


def check_checkpoint(log: EventStore, directory: str | os.PathLike[str] | None) -> Check:
    if not directory:
        return Check(
            "checkpoint",
            "warn",
            "no [audit] checkpoint_dir is configured: a lost tail of the log cannot be seen",
            "set [audit] checkpoint_dir (on another disk) in the config; 'rota run' writes "
            "checkpoints there",
        )
    try:
        newest = checkpoints.latest(directory)
    except checkpoints.CheckpointError as exc:
        return Check("checkpoint", "fail", str(exc), f"inspect the files in {directory}")
    if newest is None:
        return Check(
            "checkpoint",
            "warn",
            f"no checkpoint in {directory} yet",
            f"'rota audit checkpoint --dir {directory}' writes one now",
        )
    verdict = check_extends(log, newest)
    if verdict is None:
        return Check(
            "checkpoint",
            "ok",
            f"the log extends the checkpoint at position {newest.position} "
            f"(written {newest.written_at})",
        )
    code, reason = verdict
    return Check("checkpoint", "fail", f"{code}: {reason}", FULL_RESTORE)


# -- the projection file ---------------------------------------------------------------


def check_projection_tables(store: Any) -> Check:
    """The PostgreSQL equivalent of the file's integrity check: the tables are there and
    every row of them reads (PostgreSQL checks its own pages, and its checksums if on)."""
    name = "projection_integrity"
    if not store.exists():
        return Check(name, "ok", f"no projection tables in {store.where}: schedulers fold the log")
    counts = store.table_counts()
    shown = ", ".join(f"{table} {n} rows" for table, n in counts.items())
    return Check(name, "ok", f"{store.where}: every row read ({shown}); no file to check")


def check_projection_integrity(path: Path | ProjectionStore | None, immutable: bool) -> Check:
    name = "projection_integrity"
    if isinstance(path, ProjectionStore):
        return check_projection_tables(path)
    if path is None:
        return Check(name, "ok", "no projection store is named: schedulers fold the log")
    if not path.exists():
        return Check(name, "ok", f"no projection file at {path}: schedulers fold the log")
    lines = integrity(path, immutable=immutable)
    if lines == ["ok"]:
        ro = ReadOnlyProjections(path, immutable=immutable)
        try:
            missing = {"projection_meta", *ROW_TABLES.values()} - ro.tables()
        finally:
            ro.close()
        if not missing:
            return Check(name, "ok", f"PRAGMA integrity_check of {path}: ok")
        lines = [f"not a projection store: no table {', '.join(sorted(missing))}"]
    shown = "; ".join(lines[:3]) + (f" (and {len(lines) - 3} more)" if len(lines) > 3 else "")
    return Check(name, "fail", f"{path}: {shown}", recover_advice())


def _stored_rows(ro: ProjectionStore, kind: Any, log: EventStore) -> tuple[Any, Any, str | None]:
    """(meta, rows by key, refusal) of one stored projection."""
    meta, rows = ro.rows(kind.name)
    by_key = {key: _bytes(value) for key, value in rows}
    return meta, by_key, ro.refusal(meta, kind.version, log)


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def compare_stored(kind: Any, meta: Any, rows: dict[str, bytes], fresh: Any) -> str | None:
    """Why the stored rows are not the rows a replay to their position has, else None."""
    expected = {key: fresh.row(key) for key in fresh.row_keys()}
    for key in sorted(set(rows) | set(expected)):
        if rows.get(key) != expected.get(key):
            if key not in rows:
                return f"row {key!r} is missing"
            if key not in expected:
                return f"row {key!r} should not exist"
            try:
                decoded = kind.from_rows(meta.position, list(rows.items()))
            except (msgspec.DecodeError, msgspec.ValidationError, KeyError, ValueError) as exc:
                return f"row {key!r} differs from a replay and the rows cannot be decoded: {exc}"
            first = first_difference(decoded, fresh)
            same = " (its decoded value is equal: damage in an ignored byte)" if not first else ""
            return f"row {key!r} differs from a replay of the log{same}"
    if meta.digest is not None and meta.digest != fresh.digest():
        return "the digest recorded at its save differs from a replay's"
    return None


def check_drift(
    log: EventStore, ro: ProjectionStore | None, fresh: dict[str, Any], stored: dict[str, Any]
) -> Check:
    if ro is None:
        return Check("projection_drift", "ok", "no projection store: nothing to compare")
    problems, notes, warn = [], [], False
    for kind in PERSISTED:
        meta, rows, reason = stored[kind.name]
        if meta is None:
            notes.append(f"{kind.name}: none stored")
        elif reason is not None and meta.version != kind.version:
            warn = True
            notes.append(f"{kind.name}: stale ({reason}; rebuilt when a scheduler opens it)")
        elif reason is not None:
            problems.append(f"{kind.name}: built on another log ({reason})")
        else:
            why = compare_stored(kind, meta, rows, fresh[kind.name])
            if why is None:
                notes.append(f"{kind.name}: equal to a replay at position {meta.position}")
            else:
                problems.append(f"{kind.name} at position {meta.position}: {why}")
    if problems:
        return Check("projection_drift", "fail", "; ".join(problems), recover_advice())
    if warn:
        return Check("projection_drift", "warn", "; ".join(notes), "'rota replay rebuild'")
    return Check("projection_drift", "ok", "; ".join(notes))


def check_lag(head: int, stored: dict[str, Any], threshold: int) -> Check:
    behind = {
        name: head - meta.position for name, (meta, _, _) in stored.items() if meta is not None
    }
    if not behind:
        return Check("projection_lag", "ok", "no projection stored")
    text = ", ".join(f"{name} {lag} behind" for name, lag in behind.items())
    if max(behind.values()) > threshold:
        return Check(
            "projection_lag",
            "warn",
            f"head {head}: {text} (more than {threshold})",
            "is 'rota run' running? it saves every 5,000 events; 'rota replay rebuild' "
            "brings the file to the head",
        )
    return Check("projection_lag", "ok", f"head {head}: {text}")


# -- the scheduler's state at the head ---------------------------------------------------


def _listed(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def check_leases(state: SchedulerProjection, now: datetime) -> Check:
    late = []
    for work, attempt in state.live_attempts():
        lease = timedelta(seconds=attempt.pinned.lease_seconds)
        if needs_recovery(work, now) and not work.holds and now - attempt.lease_expires_at > lease:
            expired = format_timestamp(attempt.lease_expires_at)
            late.append(f"{attempt.execution_id} (epoch {attempt.epoch}, expired {expired})")
    if not late:
        return Check("expired_leases", "ok", "no expired lease waits for recovery")
    return Check(
        "expired_leases",
        "warn",
        f"{len(late)} attempts expired more than one lease ago: {_listed(late)}",
        "is 'rota run' running? its recovery adopts or relaunches them (16 per pass); "
        "'rota explain WORK' shows the evidence",
    )


def check_timers(state: SchedulerProjection, now: datetime) -> Check:
    late = sorted((due, work) for work, due in state.timers.items() if now - due > OVERDUE)
    if not late:
        return Check("overdue_timers", "ok", f"{len(state.timers)} retry timers, none overdue")
    shown = [f"{work} (due {format_timestamp(due)})" for due, work in late]
    return Check(
        "overdue_timers",
        "warn",
        f"{len(late)} retry timers due more than a minute ago: {_listed(shown)}",
        "is 'rota run' running? its cadence fires due timers; 'rota explain WORK'",
    )


def check_capacity(view: dict[str, Any]) -> Check:
    parts, over, held_back = [], [], []
    for pool, cap in view["pools"].items():
        limit = cap["limit"] or "unbounded"  # a limit of 0 is unbounded
        parts.append(f"{pool} {cap['in_use']}/{limit} running, {cap['waiting']} held back")
        if cap["limit"] and cap["in_use"] > cap["limit"]:
            over.append(pool)
    for scope, cap in view["scopes"].items():
        parts.append(f"scope {scope} {cap['in_use']}/{cap['limit']}")
        if cap["in_use"] > cap["limit"]:
            over.append(f"scope {scope}")
    for w in view["waiting"]:
        if w["code"].startswith("capacity"):
            held_back.append(w["work"])
    detail = "; ".join(parts) + (f"; waiting for a slot: {_listed(held_back)}" if held_back else "")
    if over:
        return Check(
            "capacity",
            "warn",
            f"over the limit in {', '.join(over)}: {detail}",
            "a limit was lowered while attempts ran (they finish) or the log holds more "
            "claims than the limit: 'rota capacity --json', 'rota replay verify'",
        )
    return Check("capacity", "ok", detail)


def check_holds(state: SchedulerProjection, kind: str, name: str, advice: str) -> Check:
    """Held Work of one kind (`budget`, `crash_loop`), each with its reason."""
    held = sorted(
        (work.work_id, hold.reason)
        for work in state.works.values()
        for hold in work.holds
        if hold.kind == kind
    )
    if not held:
        return Check(name, "ok", f"no Work is held ({kind})")
    shown = [f"{work}: {reason}" for work, reason in held]
    return Check(name, "warn", f"{len(held)} Work held: {_listed(shown)}", advice)


# -- the report --------------------------------------------------------------------------


def guarded(name: str, body: Callable[[], Check]) -> Check:
    try:
        return body()
    except (apsw.Error, StoreError, OSError, ValueError, KeyError, msgspec.MsgspecError) as exc:
        advice = recover_advice() if name.startswith("projection") else FULL_RESTORE
        return Check(name, "fail", f"the check could not run: {type(exc).__name__}: {exc}", advice)


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
)
READ_ERRORS = (apsw.Error, StoreError, msgspec.MsgspecError, KeyError, ValueError)


def _projection_checks(
    log: EventStore, path: Path | ProjectionStore | None, immutable: bool, lag_threshold: int
) -> tuple[list[Check], SchedulerProjection]:
    """Drift and lag of the projection file, and the scheduler state at the head: the log
    is folded once, each fresh projection up to its stored copy's position."""
    state = SchedulerProjection()
    head = log.head().position
    with _opened(path, immutable) as ro:
        stored: dict[str, Any] = {}
        unreadable = None
        if ro is not None:
            try:
                stored = {kind.name: _stored_rows(ro, kind, log) for kind in PERSISTED}
            except READ_ERRORS as exc:
                unreadable = f"the projection file cannot be read: {type(exc).__name__}: {exc}"
        fresh = {k.name: k() for k in PERSISTED if k.name in stored and stored[k.name][0]}
        limits = [stored[name][0].position for name in fresh]
        fold(log, [*fresh.values(), state], upto=[*limits, None])
        if unreadable is not None:
            return [
                Check("projection_drift", "fail", unreadable, recover_advice()),
                Check("projection_lag", "warn", "not measured: " + unreadable),
            ], state
        return [
            guarded("projection_drift", lambda: check_drift(log, ro, fresh, stored)),
            guarded("projection_lag", lambda: check_lag(head, stored, lag_threshold)),
        ], state


def examine(
    log: EventStore,
    projections: Path | ProjectionStore | None,
    *,
    log_file: Path | None,
    immutable: bool,
    checkpoint_dir: str | os.PathLike[str] | None,
    settings: Settings,
    bindings: Mapping[str, Binding],
    lag_threshold: int = LAG_WARN,
) -> DoctorReport:
    """Every check on an opened (read-only) log; see the module docstring."""
    from rota.application.configuration import Configuration
    from rota.application.views import capacity_view
    from rota.infrastructure.executors import builtin_registrations

    checks: list[Check] = []
    if log_file is not None:
        checks.append(guarded("log_integrity", lambda: check_log_integrity(log_file, immutable)))
    else:
        checks.append(
            Check(
                "log_integrity",
                "ok",
                "not applicable on PostgreSQL: no log file to check (the server checks its own "
                "pages; hash_chain reads every event)",
            )
        )
    checks.append(guarded("hash_chain", lambda: check_chain(log)))
    checks.append(guarded("checkpoint", lambda: check_checkpoint(log, checkpoint_dir)))
    checks.append(
        guarded("projection_integrity", lambda: check_projection_integrity(projections, immutable))
    )
    try:
        found, state = _projection_checks(log, projections, immutable, lag_threshold)
    except READ_ERRORS as exc:  # the log itself cannot be folded
        why = f"the log cannot be folded: {type(exc).__name__}: {exc}"
        checks.extend(Check(name, "fail", why, FULL_RESTORE) for name in STATE_CHECKS)
        return DoctorReport(ok=False, checks=checks)
    checks.extend(found)
    now = log.now()
    # What the log pinned (in-process executors included), then the configuration's.
    pinned = [a.pinned for w in state.works.values() for a in w.attempts]
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
) -> DoctorReport:
    """The doctor's report on the store `url` names (read-only; see the module docstring)."""
    options: dict[str, Any] = {
        "checkpoint_dir": checkpoint_dir,
        "settings": settings or Settings(),
        "bindings": bindings or {},
        "lag_threshold": lag_threshold,
    }
    if is_postgres(url):
        return _doctor_postgres(url, projections, clock, options)
    proj = Path(projections) if projections is not None else default_path(url)
    path = sqlite_path(url)
    if not path.is_file():
        missing = Check("log_integrity", "fail", f"no log file at {path}", "check --store")
        return DoctorReport(ok=False, checks=[missing])
    files = [p for p in (path, proj) if p is not None]
    for attempt in range(2):
        before = [fingerprint(p) for p in files]
        calm = attempt == 0 and all(quiescent(p) for p in files)
        with ReadOnlyLog(path, immutable=calm, clock=clock) as log:
            report = examine(log, proj, log_file=path, immutable=calm, **options)
        if not calm or before == [fingerprint(p) for p in files]:
            return report
        # A writer opened a file while it was read as immutable: read again, shared.
    return report


def _doctor_postgres(
    url: str,
    projections: str | os.PathLike[str] | None,
    clock: Clock | None,
    options: dict[str, Any],
) -> DoctorReport:
    """The report on a PostgreSQL log; its projections are its schema's tables (read in a
    read-only session) unless `--projections` names a file."""
    from rota.infrastructure.stores import open_store

    with open_store(url, clock=clock) as store:
        if projections is not None and not is_postgres(projections):
            return examine(store, Path(projections), log_file=None, immutable=False, **options)
        tables = open_projection_store(store, projections, read_only=True)
        try:
            return examine(store, tables, log_file=None, immutable=False, **options)
        finally:
            if tables is not None:
                tables.close()


__all__ = [
    "LAG_WARN",
    "Check",
    "DoctorReport",
    "ReadOnlyLog",
    "ReadOnlyProjections",
    "connect_readonly",
    "doctor",
    "examine",
    "fingerprint",
    "integrity",
    "quiescent",
]
