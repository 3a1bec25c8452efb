"""Merkle proofs against checkpoints: that one event is in the log (inclusion), and that the
log at one checkpoint extends the log at an earlier one (consistency).

The proofs are the shared JSON forms (`rota-inclusion/1`, `rota-consistency/1`, documented
in docs/auditor.md): the event's previous hash and exact envelope bytes, its chain hash,
RFC 9162's PATH or PROOF (`rota.infrastructure.merkle`), and the checkpoint notes they lead
to. Before handing one out, rota checks it the way a verifier will (RFC 9162 2.1.3.2 and
2.1.4.2 against the notes' roots, the event's hash from its envelope) and refuses
(`proof_failed`) rather than print a proof that does not verify: that means the store's
rows or tree disagree with the checkpoint.
"""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import msgspec

from rota.application.ports import EventStore
from rota.domain.errors import RotaError
from rota.infrastructure import merkle
from rota.infrastructure.chain import GENESIS_HEX, row_envelope
from rota.replay import checkpoint as cp
from rota.replay.audit import check_extends
from rota.replay.errors import ReplayCode


def _proof_failed(message: str) -> RotaError:
    return RotaError(message, code=ReplayCode.PROOF_FAILED)


def _usable(store: EventStore, checkpoint: cp.Checkpoint) -> None:
    """A checkpoint a proof can be made against: a note (with a root) this log extends."""
    if checkpoint.root is None:
        raise cp.CheckpointError(
            f"the checkpoint at position {checkpoint.position} is an old JSON one, without a "
            "Merkle root: write a new one with `rota audit checkpoint`",
            code=ReplayCode.NO_COVERING_CHECKPOINT,
        )
    verdict = check_extends(store, checkpoint)
    if verdict is not None:
        raise cp.CheckpointError(verdict[1], code=verdict[0])


def covering(directory: str | os.PathLike[str], store: EventStore, position: int) -> cp.Checkpoint:
    """The newest checkpoint (with a Merkle root) of this store in `directory` whose size
    covers `position`."""
    for checkpoint in cp.newest_first(directory, store.store_id):
        if checkpoint.root is not None and checkpoint.position >= position:
            return checkpoint
        break  # (the newest has the highest position: no older one covers more)
    raise cp.CheckpointError(
        f"no checkpoint with a Merkle root in {directory} covers position {position}: "
        f"run `rota audit checkpoint --dir {directory}` first",
        code=ReplayCode.NO_COVERING_CHECKPOINT,
    )


def at_size(directory: str | os.PathLike[str], store: EventStore, size: int) -> cp.Checkpoint:
    """This store's checkpoint of exactly `size` events in `directory`."""
    for checkpoint in cp.newest_first(directory, store.store_id):
        if checkpoint.position == size and checkpoint.root is not None:
            return checkpoint
    raise cp.CheckpointError(
        f"no checkpoint with a Merkle root of size {size} in {directory}",
        code=ReplayCode.NO_COVERING_CHECKPOINT,
    )


def inclusion(store: EventStore, position: int, checkpoint: cp.Checkpoint) -> dict[str, Any]:
    """The `rota-inclusion/1` proof of the event at `position` against `checkpoint`."""
    _usable(store, checkpoint)
    size = checkpoint.position
    if not 1 <= position <= size:
        raise cp.CheckpointError(
            f"position {position} is not in the checkpoint's tree of size {size}",
            code=ReplayCode.NO_COVERING_CHECKPOINT,
        )
    rows = store.read_raw(max(position - 2, 0), 2 if position > 1 else 1)
    row = rows[-1]
    previous = rows[0].hash if position > 1 else GENESIS_HEX
    envelope = row_envelope(row)
    path = store.inclusion_path(position, size)
    event_hash = bytes.fromhex(row.hash)
    root = bytes.fromhex(checkpoint.root or "")
    if (
        row.position != position
        or hashlib.sha256(bytes.fromhex(previous) + envelope).digest() != event_hash
    ):
        raise _proof_failed(f"the row at position {position} does not hash to its stored hash")
    if not merkle.verify_inclusion(position - 1, size, merkle.leaf_hash(event_hash), path, root):
        raise _proof_failed(
            f"the inclusion path of position {position} does not lead to the checkpoint's "
            f"root at size {size}: the store's Merkle nodes are damaged (`rota audit verify`)"
        )
    return {
        "format": "rota-inclusion/1",
        "position": position,
        "tree_size": size,
        "previous_hash": previous,
        "envelope": base64.b64encode(envelope).decode(),
        "event_hash": row.hash,
        "path": [p.hex() for p in path],
        "checkpoint": checkpoint.note(),
    }


def consistency(store: EventStore, old: cp.Checkpoint, new: cp.Checkpoint) -> dict[str, Any]:
    """The `rota-consistency/1` proof that the log at `new` extends the log at `old`."""
    for checkpoint in (old, new):
        _usable(store, checkpoint)
    if not 0 < old.position <= new.position:
        raise cp.CheckpointError(
            f"no consistency proof from size {old.position} to {new.position} (0 < old <= new)",
            code=ReplayCode.INVALID_CHECKPOINT,
        )
    path = store.consistency_path(old.position, new.position)
    old_root, new_root = bytes.fromhex(old.root or ""), bytes.fromhex(new.root or "")
    if not merkle.verify_consistency(old.position, new.position, old_root, new_root, path):
        raise _proof_failed(
            f"the consistency proof from size {old.position} to {new.position} does not "
            "verify against the checkpoints' roots"
        )
    return {
        "format": "rota-consistency/1",
        "old_size": old.position,
        "new_size": new.position,
        "path": [p.hex() for p in path],
        "old_checkpoint": old.note(),
        "new_checkpoint": new.note(),
    }


def encode(proof: dict[str, Any]) -> str:
    return msgspec.json.encode(proof).decode()
