"""Doctor's checks of the log itself: the file's integrity, the hash chain, the checkpoint.

Any fail here means the log (the only authority) is damaged: the advice is a full restore,
never recover-corrupt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from rota.application.errors import PortCode
from rota.application.ports import EventStore
from rota.infrastructure.backend import Backend
from rota.infrastructure.chain import GENESIS_HEX
from rota.replay import checkpoint as checkpoints
from rota.replay.audit import check_extends, verify_chain_with
from rota.replay.checkpoint import Checkpoint
from rota.replay.doctor_report import FULL_RESTORE, Check
from rota.replay.errors import ReplayCode
from rota.replay.progress import ProgressFactory, silent
from rota.replay.regression import regressed


def check_log_integrity(store: Backend, immutable: bool) -> Check:
    """The store's own integrity check of the log (`Backend.check_integrity`)."""
    found = store.check_integrity(immutable=immutable)
    if found.sound:
        return Check("log_integrity", "ok", found.detail)
    return Check("log_integrity", "fail", found.detail, FULL_RESTORE)


LOST_OTHERWISE = (
    "if no node or export holds them (a lost disk or WAL, not a failover): stop every "
    "scheduler, keep the damaged files, restore a full backup of the store "
    "(docs/runbook-corruption.md); do not run recover-corrupt"
)

RESUME_IMPORT = (
    "run the same 'rota import EXPORT --to URL' again to finish it (it resumes), or remove "
    "this store and import into a new one"
)


TREE_DAMAGED = (
    "the rows chain, but the store's Merkle nodes (derived from them) do not: proofs from "
    "this store are wrong; restore the store from a backup (or export and import the log "
    "into a new store, which recomputes them)"
)


def check_chain(log: EventStore, progress: ProgressFactory = silent) -> Check:
    report = verify_chain_with(log, progress)
    marker = log.unfinished_import()
    if report.ok and marker is not None:  # a sound chain, but only part of an export's
        total = marker.partition(" ")[0]
        detail = f"an unfinished import: {report.head_position} of the {total} events"
        return Check("hash_chain", "fail", detail, RESUME_IMPORT)
    if report.ok:
        detail = f"{report.checked} events chained, head {report.head_position} "
        pruned = f"; {report.pruned_summary}" if report.pruned_summary else ""
        return Check("hash_chain", "ok", detail + report.head_hash[:16] + pruned)
    if report.first_bad_position is None and report.tree_ok is False:
        return Check("hash_chain", "fail", str(report.tree_reason), TREE_DAMAGED)
    detail = f"first bad position {report.first_bad_position}: {report.reason}"
    return Check("hash_chain", "fail", detail, FULL_RESTORE)


def check_checkpoint(log: EventStore, directory: str | os.PathLike[str] | None) -> Check:
    """The log must extend this store's newest checkpoint; another store's are told apart.

    Behind its own checkpoint, the log lost its tail (fail, full restore). Checkpoints of
    another store (the old one, after an import into a new store with the same
    `checkpoint_dir`) are not this log's: if this log holds the same hash at their newest
    position it continues that store (a migration: warn until this store writes its own);
    if it holds that store's earlier hashes but ends before its newest, the import missed
    that store's last events (fail: export and import again); otherwise the directory is
    shared with an unrelated store (warn).
    """
    if not directory:
        return Check(
            "checkpoint",
            "warn",
            "no [audit] checkpoint_dir is configured: a lost tail of the log cannot be seen",
            "set [audit] checkpoint_dir (on another disk) in the config; 'rota run' writes "
            "checkpoints there",
        )
    store_id = log.store_id
    try:
        newest = checkpoints.latest(directory, store_id)
        if newest is not None:
            return _judge_own(log, newest, _other_stores(directory, store_id), directory)
        foreign = list(_foreign_newest_first(log, directory, store_id))
    except checkpoints.CheckpointError as exc:
        return Check("checkpoint", "fail", str(exc), f"inspect the files in {directory}")
    if not foreign:
        return Check(
            "checkpoint",
            "warn",
            f"no checkpoint in {directory} yet",
            f"'rota audit checkpoint --dir {directory}' writes one now",
        )
    return _judge_foreign(log, directory, store_id, foreign)


def _other_stores(directory: str | os.PathLike[str], store_id: str) -> list[str]:
    """The stores other checkpoint files of the directory are named for (names only)."""
    return sorted(
        m.group(2)
        for p in checkpoints.paths(directory)
        if (m := checkpoints.FILE_RE.fullmatch(p.name)) and m.group(2) and m.group(2) != store_id
    )


def _foreign_newest_first(
    log: EventStore, directory: str | os.PathLike[str], store_id: str
) -> Iterator[Checkpoint]:
    """Other stores' checkpoints, newest first, down to the first at or below the head."""
    head = log.head().position
    for checkpoint in checkpoints.newest_first(directory):
        yield checkpoint
        if checkpoint.position <= head:
            return


def _judge_own(
    log: EventStore, newest: Checkpoint, others: list[str], directory: str | os.PathLike[str]
) -> Check:
    verdict = check_extends(log, newest)
    if verdict is None:
        return Check(
            "checkpoint",
            "ok",
            f"the log extends the checkpoint at position {newest.position} "
            f"(written {newest.written_at}){_left_alone(others)}",
        )
    code, reason = verdict
    if code in (ReplayCode.LOG_BEHIND_CHECKPOINT, ReplayCode.LOG_REWRITTEN):
        # Which recorded positions are missing, judged against every checkpoint of this
        # store: after a failover that lost acknowledged events, what to restore.
        found = regressed(log, checkpoints.newest_first(directory, log.store_id))
        if found is not None:
            source = f"recorded in its checkpoints (the newest written {newest.written_at})"
            detail = f"{PortCode.LOG_REGRESSED}: {found.describe(source)} ({code}: {reason})"
            return Check("checkpoint", "fail", detail, f"{found.advice()}; {LOST_OTHERWISE}")
    return Check("checkpoint", "fail", f"{code}: {reason}", FULL_RESTORE)


def _judge_foreign(
    log: EventStore, directory: str | os.PathLike[str], store_id: str, foreign: list[Checkpoint]
) -> Check:
    newest, last = foreign[0], foreign[-1]
    head = log.head().position
    matching = (
        [last] if last.position <= head and _hash_at(log, last.position) == last.head_hash else []
    )
    write_own = (
        f"'rota run' writes this store's own checkpoints beside them (or 'rota audit "
        f"checkpoint --dir {directory}' now); keep the old store's files with its export"
    )
    where = f"{directory} holds only checkpoints of store {newest.store_id}, not of this store"
    if matching and matching[-1] is newest:
        return Check(
            "checkpoint",
            "warn",
            f"{where} ({store_id}); this log continues that store's (the same hash at its "
            f"newest checkpoint, position {newest.position}): an import into a new store, "
            "not a lost tail",
            write_own,
        )
    if matching and newest.position > head:
        return Check(
            "checkpoint",
            "fail",
            f"{where} ({store_id}); this log holds that store's events up to position "
            f"{matching[-1].position} or later but ends at {head}, before its checkpoint at "
            f"position {newest.position} (written {newest.written_at}): the export this store "
            f"was imported from missed positions {head + 1}..{newest.position}",
            "if the old store still exists, stop its daemon, export it again ('rota export') "
            "and import that into an empty store; otherwise restore a full backup of the old "
            "store. Do not run recover-corrupt",
        )
    return Check(
        "checkpoint",
        "warn",
        f"{where} ({store_id}) and this log does not continue them: another store shares "
        "the directory",
        f"give each store its own [audit] checkpoint_dir; {write_own}",
    )


def _hash_at(log: EventStore, position: int) -> str | None:
    if position == 0:
        return GENESIS_HEX
    rows = log.read_raw(position - 1, 1)
    return rows[0].hash if rows and rows[0].position == position else None


def _left_alone(others: list[str]) -> str:
    if not others:
        return ""
    ids = sorted(set(others))
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    return f"; {len(others)} checkpoints of other stores ({shown}) are left alone"
