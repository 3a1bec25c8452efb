"""`rota import`: load a whole-log export into a new store, all or nothing; with `--append`,
put back the events a failover lost (a partial export onto the log it continues).

An import that is interrupted (Ctrl-C, SIGKILL, a power cut) never leaves a store behind
that looks whole:
- SQLite, a file that does not exist yet: the rows go into `<file>.importing` beside it,
  which is renamed onto the file (atomically, the directory fsynced) only once its chain
  is verified. Until then there is no store at the target: every other command finds none
  (`store_not_found`). A re-run finds `<file>.importing` and resumes after its last page.
- Every other target (PostgreSQL, an existing empty SQLite store): the import marks the
  store unfinished before its first row (`EventStore.mark_import`) and clears the mark
  only once the chain is verified; every other command refuses a marked store
  (`import_incomplete`, naming what to do) and a re-run of the same import resumes.
The import holds the store's daemon lock exclusively (SQLite: `<file>.lock`), so no
daemon starts on a half store, and an import while a daemon runs is `store_busy`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

import msgspec

from rota import bootstrap
from rota.application.ports import EventStore
from rota.cli.common import UsageError, load_config, print_json
from rota.domain.errors import RotaError
from rota.infrastructure.config import Config
from rota.infrastructure.store_url import backend
from rota.infrastructure.stores import redact_url
from rota.replay.audit import ChainReport
from rota.replay.daemon_lock import DaemonLock
from rota.replay.export import import_export
from rota.replay.progress import ProgressFactory

IMPORTING_SUFFIX = ".importing"


def cmd_import(args: argparse.Namespace) -> int:
    from rota.cli.run_logs import progress_logging

    target = args.to or args.store
    if not target:
        raise UsageError("import needs the target store: rota import EXPORT --to URL")
    if args.append:
        return _append(args, target)
    with progress_logging(args) as progress:
        report, resumed = import_into(target, args.export, load_config(args), progress=progress)
    url = redact_url(target)
    if args.json:
        print_json({**msgspec.to_builtins(report), "store": url, "resumed_after": resumed})
    else:
        again = f" (resumed an interrupted import after position {resumed})" if resumed else ""
        print(
            f"imported {report.checked} events into {url}, "
            f"head {report.head_position} {report.head_hash} (chain verified){again}"
        )
    return 0


def _append(args: argparse.Namespace, target: str) -> int:
    """`rota import --append EXPORT`: put back the events a failover lost
    (`rota.replay.regression.append_export`)."""
    from rota.cli.run_logs import progress_logging
    from rota.replay.regression import append_export

    with (
        progress_logging(args) as progress,
        bootstrap.open_log(target, load_config(args), create=False) as store,
    ):
        first, last = append_export(args.export, store, progress=progress)
        head = store.head()
    url = redact_url(target)
    count = max(0, last - first + 1)
    if args.json:
        print_json({"store": url, "appended": count, "first": first, "last": last,
                    "head_position": head.position, "head_hash": head.hash})  # fmt: skip
    elif count:
        print(f"appended positions {first}..{last} ({count} events) to {url}, head "
              f"{head.position} {head.hash} (every link checked)")  # fmt: skip
    else:
        print(f"nothing to append: {url} already holds every event of {args.export}")
    return 0


def import_into(
    target: str, export: str, config: Config, *, progress: ProgressFactory
) -> tuple[ChainReport, int]:
    """Import `export` into the store `target` names, atomically (see the module
    docstring); the verified chain, and the position an interrupted import had reached
    (0: a fresh import)."""
    log_file = backend(target).log_file
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    with DaemonLock.for_store(target, exclusive=True):
        if log_file is None or log_file.exists():
            with bootstrap.open_log(target, config, importing=True) as store:
                resumed = _resumed(store)
                return import_export(export, store, progress=progress), resumed
        return _import_beside(log_file, export, config, progress=progress)


def _import_beside(
    log_file: Path, export: str, config: Config, *, progress: ProgressFactory
) -> tuple[ChainReport, int]:
    """Import into `<log_file>.importing`, then rename it onto `log_file`."""
    partial = log_file.absolute().with_name(log_file.name + IMPORTING_SUFFIX)
    url = f"sqlite:///{partial}"
    try:
        with bootstrap.open_log(url, config, importing=True) as store:
            resumed = _resumed(store)
            report = import_export(export, store, progress=progress)
    except BaseException:
        _drop_if_empty(url, partial)  # refused before any row (a bad export): leave nothing
        raise
    # Closed: the WAL is checkpointed into the file and removed, so the file is the store.
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(f"{partial}.wake")  # the commit nudges' directory, if one was made
    os.replace(partial, log_file)
    directory = os.open(log_file.absolute().parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return report, resumed


def _drop_if_empty(url: str, partial: Path) -> None:
    """Remove `partial` when it holds no event (nothing to resume)."""
    try:
        with bootstrap.open_log(url, create=False, importing=True) as store:
            empty = store.head().position == 0
    except RotaError:
        return
    if empty:
        for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            leftover.unlink(missing_ok=True)


def _resumed(store: EventStore) -> int:
    """Where an interrupted import of this store stopped (0: none)."""
    return store.head().position if store.unfinished_import() is not None else 0


__all__ = ["IMPORTING_SUFFIX", "cmd_import", "import_into"]
