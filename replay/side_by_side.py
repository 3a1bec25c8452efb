"""Optimisation: a rebuild's or verify's folds run at once, one per CPU, not one after the
other (bench replay).

Folding fresh projections side by side: one per CPU, each reading the log itself.

A rebuild or a verify folds every persisted projection from position 0. The folds are
independent (each reads the same log and keeps its own state), so on a machine with more
than one CPU all but the first run in forked children, each through its own connection to
the log (`open_store(log.url)`, or the log's own `reopened()`: a read-only log, doctor's,
opens read-only again; an SQLite connection must not cross a fork). A child sends
back what the projection store needs of its projection and nothing more: its encoded rows,
position and digest (`FoldedRows`). The first projection (the scheduler's, which `verify`
also needs whole for the derived views) is folded in this process meanwhile.

The result is the same as folding them one after the other (a test compares digests); a
child that fails raises here with its error, and nothing was written anywhere. With one
CPU, no `fork` (Windows), a store without a URL another process can open, or one
projection, the folds simply run here in turn.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rota.application.ports import EventStore
from rota.infrastructure.spill import SpilledRows, Spiller, SpillFile
from rota.infrastructure.store_url import backend
from rota.infrastructure.stores import open_store
from rota.replay.progress import ProgressFactory, silent

CHUNK = 2000  # rows per message from a child
# Where each fold spills: a scratch directory (a file per projection there), or a function
# giving a projection's name its `SpillFile` (a projection store's staging table).
SpillTo = Path | Callable[[str], SpillFile]


def open_spill(spill: SpillTo, name: str) -> SpillFile:
    """The `SpillFile` the fold of projection `name` spills to."""
    return SpillFile(spill / f"{name}.spill") if isinstance(spill, Path) else spill(name)


class FoldedRows:
    """A projection folded in another process, as the rows a projection store writes.

    It has what `ProjectionStore.replace` and the comparisons of `verify` use of a
    projection (`name`, `version`, `position`, `dirty`, `row`, `row_keys`, `digest`); it
    cannot fold further.
    """

    def __init__(
        self, name: str, version: int, position: int, rows: dict[str, bytes], digest: str
    ) -> None:
        self.name, self.version, self.position = name, version, position
        self.rows = rows
        self._digest = digest
        self.dirty: set[str] = set()
        self.peak_rss_mib: float | None = None

    def row(self, key: str) -> bytes | None:
        return self.rows.get(key)

    def row_keys(self) -> Iterator[str]:
        return iter(self.rows)

    def digest(self) -> str:
        return self._digest


class ChildFoldError(RuntimeError):
    """A fold in a forked child failed (its traceback is in the message) or died."""


def can_split(log: EventStore, count: int) -> bool:
    """Whether `count` folds of `log` can run side by side here."""
    return (
        count > 1
        and (os.cpu_count() or 1) > 1
        and "fork" in multiprocessing.get_all_start_methods()
        and backend(log.url).processes_share
    )


def fold_side_by_side(
    log: EventStore,
    kinds: Sequence[Any],
    upto: Sequence[int | None],
    *,
    progress: ProgressFactory = silent,
    label: str = "fold",
    spill: SpillTo | None = None,
) -> tuple[list[Any], int]:
    """Fresh projections of `kinds`, each folded to its `upto` (None: the head): the first a
    projection object folded here, the others `FoldedRows` from children when `can_split`
    (else projection objects folded here in turn). Returns them and the last position
    applied to any.

    `spill` (a scratch directory, or a function naming each projection's `SpillFile`):
    every fold, here or in a child, spills there as it goes (`rota.infrastructure.spill`)
    and each result is its `SpilledRows`."""
    from rota.replay.rebuild import fold

    if not can_split(log, len(kinds)):
        fresh = [kind() for kind in kinds]
        if spill is None:
            return fresh, fold(log, fresh, upto=list(upto), progress=progress, label=label)
        spillers = [Spiller(p, open_spill(spill, p.name)) for p in fresh]
        position = fold(
            log,
            fresh,
            upto=list(upto),
            progress=progress,
            label=label,
            after_page=lambda: _each_page_done(spillers),
        )
        return [s.finish() for s in spillers], position
    context = multiprocessing.get_context("fork")
    children = []
    for kind, limit in zip(kinds[1:], upto[1:], strict=True):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(
            target=_fold_child, args=(_opener(log), kind, limit, send, spill), daemon=True
        )
        child.start()
        send.close()
        children.append((child, receive))
    first = kinds[0]()
    try:
        if spill is None:
            position = fold(log, [first], upto=[upto[0]], progress=progress, label=label)
        else:
            spiller = Spiller(first, open_spill(spill, first.name))
            position = fold(
                log,
                [first],
                upto=[upto[0]],
                progress=progress,
                label=label,
                after_page=spiller.page_done,
            )
            first = spiller.finish()
        folded: list[Any] = [first]
        for child, receive in children:
            found = _receive(child, receive)
            folded.append(found)
            position = max(position, found.position)
    finally:
        for child, receive in children:
            receive.close()
            if child.is_alive():
                child.terminate()
            child.join()
    return folded, position


def _each_page_done(spillers: Sequence[Spiller]) -> None:
    for spiller in spillers:
        spiller.page_done()


def _receive(child: Any, receive: Connection) -> FoldedRows | SpilledRows:
    """Collect one child's rows (sent in chunks) and its closing message."""
    rows: dict[str, bytes] = {}
    while True:
        try:
            message = receive.recv()
        except EOFError:
            child.join()
            raise ChildFoldError(
                f"a projection fold in a child process ended without a result "
                f"(exit code {child.exitcode}); run it again, or with one CPU to see the error"
            ) from None
        if message[0] == "rows":
            rows.update(message[1])
            continue
        if message[0] == "error":
            raise ChildFoldError(f"a projection fold in a child process failed:\n{message[1]}")
        _, name, version, position, digest, rss, spilled, *peak = message
        folded: FoldedRows | SpilledRows
        if spilled is not None:
            folded = SpilledRows(name, version, position, _reopened(spilled), digest)
            folded.peak_held = peak[0]
        else:
            folded = FoldedRows(name, version, position, rows, digest)
        folded.peak_rss_mib = rss
        return folded


def _reopened(where: tuple[str, str, bool]) -> SpillFile:
    """A child's spill file, opened here (`SpillFile.where`)."""
    path, table, staged = where
    return SpillFile(path, table, staged=staged)


def _opener(log: EventStore) -> Callable[[], EventStore]:
    """How a child opens `log` for itself: its `reopened()` when it has one (a read-only
    log opens read-only again), else `open_store` of its URL."""
    url = log.url

    def open_log() -> EventStore:
        return log.reopened() or open_store(url)

    return open_log


def _fold_child(
    open_log: Callable[[], EventStore],
    kind: Any,
    upto: int | None,
    send: Connection,
    spill: SpillTo | None = None,
) -> None:
    """In the child: fold one projection through a connection of its own (`open_log()`),
    then send its rows in key order, in chunks (so neither side holds them all twice), and
    its digest; with `spill`, fold spilling to a file there and send only its path and the
    digest."""
    from rota.replay.rebuild import fold

    try:
        log = open_log()
        try:
            projection = kind()
            if spill is not None:
                spiller = Spiller(projection, open_spill(spill, kind.name))
                fold(log, [projection], upto=[upto], after_page=spiller.page_done)
            else:
                fold(log, [projection], upto=[upto])
        finally:
            log.close()
        if spill is not None:
            rows = spiller.finish()
            rows.spill.close()
            message: tuple[Any, ...] = (
                "done",
                kind.name,
                kind.version,
                rows.position,
                rows.digest(),
                _peak_rss(),
                rows.spill.where(),
                rows.peak_held,
            )
            send.send(message)
            return
        digest_rows = getattr(kind, "digest_rows", None)
        sent = _send_rows(projection, send)
        if digest_rows is not None:
            digest = digest_rows(sent, projection.position)
        else:
            for _ in sent:
                pass
            digest = projection.digest()
        message = ("done", kind.name, kind.version, projection.position, digest, _peak_rss(), None)
        send.send(message)
    except BaseException:  # reported to the parent, which raises it
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()


def _send_rows(projection: Any, send: Connection) -> Iterator[tuple[str, bytes]]:
    """Encode and send the projection's rows in key order, yielding each as it goes."""
    chunk: list[tuple[str, bytes]] = []
    for key in sorted(projection.row_keys()):
        value = projection.row(key)
        if value is None:
            continue
        chunk.append((key, value))
        if len(chunk) >= CHUNK:
            send.send(("rows", chunk))
            chunk = []
        yield key, value
    if chunk:
        send.send(("rows", chunk))


def _peak_rss() -> float | None:
    """This process's peak RSS in MiB (`VmHWM`: its own, not the parent's before the fork)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


__all__ = ["ChildFoldError", "FoldedRows", "can_split", "fold_side_by_side"]
