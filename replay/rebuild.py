"""Rebuild and verify the stored projections by folding the log from position 0.

- `fold` applies the log, read in pages of 10,000 events, to fresh projections, each up to
  its own position (default: the head). Projections read time only from events, so a fold
  fabricates nothing and two folds of one log are equal. Every projection is fed from the
  same page: each event is read and decoded once, however many projections fold it
  (`fold_spilling` is that fold with each projection spilling as it goes).
- `rebuild` folds fresh projections to the head and swaps them into the projection store
  in one transaction (the old rows stay intact if anything fails before the commit).
- `verify` folds fresh projections to the position each stored one claims and compares
  digests; on a difference it names the projection and the first row key (in sorted
  order) whose value differs. It returns a report and never raises for drift. Its memory
  does not grow with the log: the folds spill, the stored rows stream (`row_streams`).

`rebuild`, `verify` and `rota doctor` fold all their projections in this one read of the log,
in this process. Until issue 33 the history projection was folded in a forked child that
read and decoded the whole log again: a read is about a sixth of a rebuild's instructions
(18k of 108k an event; bench/RESULTS.md, "fold: one read"), so the folds now take less
CPU in all (0.82x the instructions, 0.86x the CPU), and one process's memory, but more wall
time where a second core was idle (the two folds ran at once).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from rota.application.collection import fewer_collections
from rota.application.ports import EventStore, ProjectionStore
from rota.application.timestamps import recorded_times
from rota.infrastructure.spill import SpilledRows, Spiller, SpillFile
from rota.projections import DERIVED, PERSISTED, HistoryProjection, SchedulerProjection
from rota.replay.progress import ProgressFactory, silent
from rota.replay.row_streams import (
    Reading,
    SchedulerReading,
    canonical_rows,
    first_mismatch,
    opened,
    read_rows,
    read_scheduler,
)

PAGE = 10_000
# A fold allocates millions of short-lived structs (events, states, rows) and next to no
# cyclic garbage; the collector's default generation-0 threshold (700) would run it every
# few events (and its full passes walk every tracked object). It still runs, this often.
FOLD_GC_THRESHOLD = 100_000
Persisted = SchedulerProjection | HistoryProjection
# Where each fold spills: a scratch directory (a file per projection there), or a function
# giving a projection's name its `SpillFile` (a projection store's staging table).
SpillTo = Path | Callable[[str], SpillFile]


class ProjectionVerdict(msgspec.Struct, frozen=True):
    """One projection compared with a fresh fold.

    `status`: `ok`; `drift` (the rows differ: `first_key` names the first, in key order);
    `foreign` (built on another log, or the log was rewritten or lost its tail);
    `stale` (built by another fold version: it is rebuilt on open, nothing to compare);
    `missing` (nothing stored). Derived projections are compared through the scheduler
    projection they are views of.
    """

    name: str
    status: str
    position: int | None = None
    stored_digest: str | None = None
    rebuilt_digest: str | None = None
    first_key: str | None = None
    detail: str = ""


class VerifyReport(msgspec.Struct, frozen=True):
    """`ok` unless a projection drifted or belongs to another log; `drift` names the first."""

    ok: bool
    head: int
    projections: list[ProjectionVerdict]

    @property
    def drift(self) -> ProjectionVerdict | None:
        return next((v for v in self.projections if v.status in ("drift", "foreign")), None)


class RebuildReport(msgspec.Struct, frozen=True):
    position: int
    projections: list[str]
    digests: dict[str, str]
    rows: dict[str, int]
    seconds: float


def _kind(name: str) -> Any:
    for kind in PERSISTED:
        if kind.name == name:
            return kind
    for derived in DERIVED:
        if derived.name == name:
            return SchedulerProjection
    known = ", ".join(p.name for p in (*PERSISTED, *DERIVED))
    raise ValueError(f"no projection {name!r} (known: {known})")


def fold(
    store: EventStore,
    projections: Sequence[Any],
    *,
    upto: int | Sequence[int | None] | None = None,
    progress: ProgressFactory = silent,
    label: str = "fold",
    after_page: Callable[[], None] | None = None,
) -> int:
    """Apply the log to `projections` (each up to its `upto`, default the head, read in
    pages; `after_page()` after each page); returns the last position applied to any."""
    limits = list(upto) if isinstance(upto, Sequence) else [upto] * len(projections)
    head = store.head().position
    stops = [head if limit is None else min(limit, head) for limit in limits]
    end = max(stops, default=0)
    position = min((p.position for p in projections), default=end)
    parsed: dict[str, datetime] = {}
    with fewer_collections(FOLD_GC_THRESHOLD), progress(end, label) as bar:
        bar.advance(position)
        while position < end:
            batch = store.read(position, min(PAGE, end - position))
            if not batch:
                break
            times = recorded_times(batch, parsed)
            for projection, stop in zip(projections, stops, strict=True):
                _apply_page(projection, batch, times, stop)
            position = batch[-1].position
            bar.advance(len(batch))
            if after_page is not None:
                after_page()
    for projection in projections:
        if hasattr(projection, "settle"):
            projection.settle()
    return position


def _apply_page(projection: Any, batch: Sequence[Any], times: list[datetime], stop: int) -> None:
    """One page into one projection: its bulk `fold_page` when it has one (the persisted
    projections; `settle()` finishes them), else `apply` per event."""
    fold_page = getattr(projection, "fold_page", None)
    if fold_page is not None:
        fold_page(batch, times, stop)
        return
    for r, at in zip(batch, times, strict=True):
        if r.position > stop:
            break
        projection.apply(r.position, r.stream, r.version, at, r.event)


def open_spill(spill: SpillTo, name: str) -> SpillFile:
    """The `SpillFile` the fold of projection `name` spills to."""
    return SpillFile(spill / f"{name}.spill") if isinstance(spill, Path) else spill(name)


def fold_spilling(
    store: EventStore,
    kinds: Sequence[Any],
    upto: Sequence[int | None],
    *,
    spill: SpillTo,
    progress: ProgressFactory = silent,
    label: str = "fold",
) -> tuple[list[SpilledRows], int]:
    """Fresh projections of `kinds`, each folded to its `upto` (None: the head) from one
    read of the log (`fold`), each spilling to `spill` as it goes (its memory bounded by
    the active Works: `rota.infrastructure.spill`); returns each as its `SpilledRows`, and
    the last position applied to any. On an error every spill file is closed."""
    spillers: list[Spiller] = []
    try:
        for kind in kinds:
            spillers.append(Spiller(kind(), open_spill(spill, kind.name)))

        def page_done() -> None:
            for spiller in spillers:
                spiller.page_done()

        position = fold(
            store,
            [s.projection for s in spillers],
            upto=list(upto),
            progress=progress,
            label=label,
            after_page=page_done,
        )
        return [s.finish() for s in spillers], position
    except BaseException:
        for spiller in spillers:
            spiller.spill.close()
        raise


def rebuild(
    store: EventStore,
    projection_store: ProjectionStore,
    name: str | None = None,
    progress: ProgressFactory = silent,
) -> RebuildReport:
    """Fold fresh projections (all, or the one `name`d; a derived one rebuilds the scheduler
    projection it is a view of) to the head and swap them in atomically."""
    started = time.monotonic()
    kinds = list(PERSISTED) if name is None else [_kind(name)]
    # Each fold spills what it need not hold as it goes, so its memory does not grow with
    # the number of Works (`rota.infrastructure.spill`). A projection store that can stage
    # the new rows in its own file (SQLite, alone on its file:
    # `SQLiteProjectionStore.staging`) has the folds spill there, so the swap renames their
    # rows into place (measured: fewer instructions than a scratch file's rows copied by
    # the swap); without staging each fold spills to a scratch file whose rows the swap
    # copies.
    staging = getattr(projection_store, "staging", None)
    names = [kind.name for kind in kinds]
    staged = staging(names) if staging is not None else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="rota-rebuild-") as scratch, staged as stage:
        fresh, position = fold_spilling(
            store,
            kinds,
            [None] * len(kinds),
            spill=Path(scratch) if stage is None else stage,
            progress=progress,
            label="rebuild",
        )
        try:
            rows = {p.name: p.row_count for p in fresh}  # before a staging table is renamed
            projection_store.replace(fresh, store)
            stored = projection_store.metas()  # the digests `replace` computed
            return RebuildReport(
                position=position,
                projections=[p.name for p in fresh],
                digests={p.name: stored[p.name].digest or p.digest() for p in fresh},
                rows=rows,
                seconds=round(time.monotonic() - started, 3),
            )
        finally:
            for projection in fresh:
                projection.spill.close()


def first_difference(left: Any, right: Any) -> str | None:
    """The first row key (sorted) whose value differs between two projections, or None."""
    keys = sorted(set(left.row_keys()) | set(right.row_keys()))
    return next((key for key in keys if left.row(key) != right.row(key)), None)


def verify(
    store: EventStore,
    projection_store: ProjectionStore,
    progress: ProgressFactory = silent,
) -> VerifyReport:
    """Compare every stored projection with a fresh fold to its position (see the module
    docstring); derived projections are compared through the scheduler projection.

    In memory bounded by the active Works at any log size: the stored rows stream in key
    order (one snapshot of the projection store, held to the end) and are digested as they
    go; the fresh folds spill as a rebuild's do, and a difference is found by walking both
    row streams in key order (`rota.replay.row_streams`)."""
    verdicts: dict[str, ProjectionVerdict] = {}
    stored: dict[str, Reading] = {}
    positions: dict[str, int] = {}
    with projection_store.snapshot(), tempfile.TemporaryDirectory(prefix="rota-verify-") as scratch:
        for kind in PERSISTED:
            meta = projection_store.meta(kind.name)
            reason = projection_store.refusal(meta, kind.version, store)
            if meta is None:
                verdicts[kind.name] = ProjectionVerdict(kind.name, "missing", detail=reason or "")
                continue
            if reason is not None:
                status = "stale" if meta.version != kind.version else "foreign"
                verdicts[kind.name] = ProjectionVerdict(
                    kind.name, status, meta.position, detail=reason
                )
                continue
            with opened(projection_store.sorted_rows(kind.name)) as rows:
                reading = read_rows(kind, meta.position, rows)
            if not reading.decoded:
                verdicts[kind.name] = ProjectionVerdict(
                    kind.name,
                    "drift",
                    meta.position,
                    first_key=reading.bad_key,
                    detail="a row cannot be decoded",
                )
                continue
            stored[kind.name], positions[kind.name] = reading, meta.position
        kinds = [kind for kind in PERSISTED if kind.name in stored]
        fresh, _ = fold_spilling(
            store,
            kinds,
            [positions[kind.name] for kind in kinds],
            spill=Path(scratch),
            progress=progress,
            label="verify",
        )
        try:
            for kind, projection in zip(kinds, fresh, strict=True):
                verdicts[kind.name] = _compare_rows(
                    kind, positions[kind.name], stored[kind.name], projection, projection_store
                )
            if "scheduler" in stored:
                verdicts.update(_compare_derived(stored["scheduler"], fresh[0]))
        finally:
            for projection in fresh:
                projection.spill.close()
    order = [p.name for p in PERSISTED] + [d.name for d in DERIVED]
    found = [verdicts[name] for name in order if name in verdicts]
    ok = all(v.status not in ("drift", "foreign") for v in found)
    return VerifyReport(ok=ok, head=store.head().position, projections=found)


def _compare_rows(
    kind: Any, position: int, stored: Reading, fresh: Any, projection_store: ProjectionStore
) -> ProjectionVerdict:
    """A stored projection at `position` (its reading) against its fresh fold
    (`SpilledRows`); on a difference its rows are read again, to walk beside the fold's."""
    ours, theirs = stored.digest, fresh.digest()
    if ours == theirs:
        return ProjectionVerdict(kind.name, "ok", position, ours, theirs)
    with opened(projection_store.sorted_rows(kind.name)) as rows:
        found = first_mismatch(canonical_rows(kind, stored, rows), fresh.spill.items())
    key = found[0] if found is not None else None
    detail = f"row {key!r} differs from a fold of the log" if key else "the digests differ"
    return ProjectionVerdict(kind.name, "drift", position, ours, theirs, key, detail)


def _compare_derived(stored: Reading, fresh: Any) -> dict[str, ProjectionVerdict]:
    """The derived projections: views of the active and held Works of each side. Equal
    scheduler digests mean equal Works, ledgers and budgets: then the fresh side's views
    are the stored side's, and its rows need not be read again."""
    assert isinstance(stored, SchedulerReading)
    ours = stored.projection
    theirs = ours
    if stored.digest != fresh.digest():
        theirs = read_scheduler(fresh.position, fresh.spill.items(), trusted=True).projection
    return {d.name: _compare(d.name, d(ours), d(theirs)) for d in DERIVED}


def _compare(name: str, stored: Any, fresh: Any) -> ProjectionVerdict:
    ours, theirs = stored.digest(), fresh.digest()
    if ours == theirs:
        return ProjectionVerdict(name, "ok", stored.position, ours, theirs)
    key = first_difference(stored, fresh)
    detail = f"row {key!r} differs from a fold of the log" if key else "the digests differ"
    return ProjectionVerdict(name, "drift", stored.position, ours, theirs, key, detail)


def folded(store: EventStore, upto: int | None = None) -> tuple[SchedulerProjection, int]:
    """A scheduler projection folded from position 0 up to `upto` (default: the head)."""
    scheduler = SchedulerProjection()
    position = fold(store, [scheduler], upto=upto)
    return scheduler, position


__all__ = [
    "PAGE",
    "ProjectionVerdict",
    "RebuildReport",
    "VerifyReport",
    "first_difference",
    "fold",
    "fold_spilling",
    "folded",
    "open_spill",
    "rebuild",
    "verify",
]
