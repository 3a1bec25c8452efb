"""Doctor's checks of the log itself: the file's integrity, the hash chain, the checkpoint.

Any fail here means the log (the only authority) is damaged: the advice is a full restore,
never recover-corrupt.
"""

from __future__ import annotations

import os
from pathlib import Path

from rota.application.ports import EventStore
from rota.replay import checkpoint as checkpoints
from rota.replay.audit import check_extends, verify_chain
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
