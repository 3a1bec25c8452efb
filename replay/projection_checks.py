"""Doctor's checks of the stored projections: integrity, drift from a replay, and lag.

`projection_integrity` is the file's `PRAGMA integrity_check` (on PostgreSQL: the tables
are there and every row reads); `projection_drift` compares every stored row, byte for byte
and decoded, with a replay of the log to the projection's position; `projection_lag` warns
beyond a threshold of events behind the head. A damaged projection store is derived: the
advice is recover-corrupt (`recover_advice`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rota.application.ports import EventStore, ProjectionStore
from rota.infrastructure.projection_tables import ROW_TABLES
from rota.projections import PERSISTED
from rota.replay.doctor_report import Check, recover_advice
from rota.replay.read_only import ReadOnlyProjections, integrity
from rota.replay.row_streams import Rows, canonical_rows, first_mismatch, opened, read_rows


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


def stored_rows(ro: ProjectionStore, kind: Any, log: EventStore) -> tuple[Any, Any, str | None]:
    """(meta, rows, refusal) of one stored projection: `rows()` streams its rows in key order
    (in the caller's `snapshot()`). Every row is read once here, so a row whose value is not
    bytes (a damaged file) is found before anything is folded, as when it was read whole."""
    meta = ro.meta(kind.name)

    def rows() -> Iterator[tuple[str, bytes]]:
        with opened(ro.sorted_rows(kind.name)) as found:
            for key, value in found:
                yield key, _bytes(kind.name, key, value)

    for _ in rows():
        pass
    return meta, rows, ro.refusal(meta, kind.version, log)


def _bytes(name: str, key: str, value: Any) -> bytes:
    """A stored row's bytes; a damaged file (a cut page) can hand back NULL or a number."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ValueError(
        f"{name} row {key!r} holds {'NULL' if value is None else type(value).__name__}, "
        "not the bytes of a row"
    )


def compare_stored(kind: Any, meta: Any, rows: Callable[[], Rows], fresh: Any) -> str | None:
    """Why the stored rows (`rows()`: a stream in key order) are not the rows a replay to
    their position has (`fresh`: a spilled fold), else None. The two streams are walked side
    by side, byte for byte; at a difference the stored rows are decoded (streamed again) to
    tell damage in an ignored byte from a different value."""
    with opened(rows()) as ours, opened(fresh.spill.items()) as theirs:
        found = first_mismatch(ours, theirs)
    if found is not None:
        key, stored, expected = found
        if stored is None:
            return f"row {key!r} is missing"
        if expected is None:
            return f"row {key!r} should not exist"
        with opened(rows()) as again:
            reading = read_rows(kind, meta.position, again)
        if not reading.decoded:
            return (
                f"row {key!r} differs from a replay and the rows cannot be decoded: {reading.error}"
            )
        with opened(rows()) as again, opened(fresh.spill.items()) as theirs:
            first = first_mismatch(canonical_rows(kind, reading, again), theirs)
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
