"""Doctor's checks of the log itself: the file's integrity, the hash chain, the checkpoint.

Any fail here means the log (the only authority) is damaged: the advice is a full restore,
never recover-corrupt.
"""

from __future__ import annotations

import os
from pathlib import Path

from rota.application.ports import EventStore
from rota.infrastructure.chain import GENESIS_HEX
from rota.replay import checkpoint as checkpoints
from rota.replay.audit import check_extends, verify_chain
from rota.replay.checkpoint import Checkpoint
from rota.replay.doctor_report import FULL_RESTORE, Check
from rota.replay.read_only import integrity


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
    try:
        every = checkpoints.load_all(directory) if Path(directory).is_dir() else []
    except checkpoints.CheckpointError as exc:
        return Check("checkpoint", "fail", str(exc), f"inspect the files in {directory}")
    store_id = log.store_id
    own = [c for c in every if c.store_id == store_id]
    foreign = [c for c in every if c.store_id != store_id]
    if own:
        return _judge_own(log, own[-1], foreign)
    if not foreign:
        return Check(
            "checkpoint",
            "warn",
            f"no checkpoint in {directory} yet",
            f"'rota audit checkpoint --dir {directory}' writes one now",
        )
    return _judge_foreign(log, directory, store_id, foreign)


def _judge_own(log: EventStore, newest: Checkpoint, foreign: list[Checkpoint]) -> Check:
    verdict = check_extends(log, newest)
    if verdict is None:
        others = f"; {_stores(foreign)} are left alone" if foreign else ""
        return Check(
            "checkpoint",
            "ok",
            f"the log extends the checkpoint at position {newest.position} "
            f"(written {newest.written_at}){others}",
        )
    code, reason = verdict
    return Check("checkpoint", "fail", f"{code}: {reason}", FULL_RESTORE)


def _judge_foreign(
    log: EventStore, directory: str | os.PathLike[str], store_id: str, foreign: list[Checkpoint]
) -> Check:
    newest = foreign[-1]
    head = log.head().position
    matching = [
        c for c in foreign if c.position <= head and _hash_at(log, c.position) == c.head_hash
    ]
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


def _stores(found: list[Checkpoint]) -> str:
    ids = sorted({c.store_id for c in found})
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    return f"{len(found)} checkpoints of other stores ({shown})"
