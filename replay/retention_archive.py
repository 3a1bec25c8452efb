"""Reading what a prune archived: the original rows, to restore them where a reader needs
their payloads (`rota export --archive DIR`, `rota explain`).

An archive (`prune-<tree size>-<store id>.jsonl`, written by `rota.replay.retention`) is a
header line (format, store, policy, tree size, root, the checkpoint note), then one
`rota export` line per pruned event with its inclusion proof (`path`). A row is restored
only when its original content links, from the hash of the row before it, to the hash the
log still stores: an archive that was edited, or belongs to another log, restores nothing.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import msgspec

from rota.application.ports import RawRecord
from rota.infrastructure.chain import link_row, row_envelope
from rota.replay.export import ExportLine

ARCHIVE_FORMAT = "rota-archive/1"


class ArchiveHeader(msgspec.Struct, frozen=True):
    format: str
    store_id: str
    policy: str
    tree_size: int
    root: str | None
    checkpoint: str


class ArchivedLine(ExportLine, frozen=True):
    previous_hash: str = ""
    path: list[str] = []


_header = msgspec.json.Decoder(ArchiveHeader)
_line = msgspec.json.Decoder(ArchivedLine)


class Archive:
    """The archived rows of every prune archive in a directory, by position."""

    def __init__(self, directory: str | os.PathLike[str], store_id: str | None = None) -> None:
        self.directory = Path(directory)
        self.rows: dict[int, RawRecord] = {}
        self.files: dict[int, str] = {}
        for file in sorted(self.directory.glob("prune-*.jsonl")):
            with open(file, "rb") as src:
                head = _header.decode(src.readline())
                if head.format != ARCHIVE_FORMAT:
                    continue
                if store_id is not None and head.store_id != store_id:
                    continue
                for raw in src:
                    line = _line.decode(raw)
                    self.rows[line.position] = _record(line)
                    self.files[line.position] = file.name

    def restore(self, previous_hash: str, record: RawRecord) -> RawRecord | None:
        """The original of a pruned `record` (whose predecessor's hash is `previous_hash`),
        or None when the archive has none that links to the stored hash."""
        original = self.rows.get(record.position)
        if original is None:
            return None
        if link_row(bytes.fromhex(previous_hash), original).hex() != record.hash:
            return None
        return original


def _record(line: ExportLine) -> RawRecord:
    data: str | bytes = line.data
    if line.data_encoding == "base64":
        data = base64.b64decode(line.data)
    return RawRecord(
        line.position,
        line.stream,
        line.version,
        line.type,
        line.type_version,
        line.delivery_id,
        data,
        line.recorded_at,
        line.hash,
    )


def inclusion_proofs(file: str | os.PathLike[str]) -> list[dict[str, object]]:
    """Each archived event of one archive file as a `rota-inclusion/1` proof (the format
    `rota audit prove --json` prints), for `rota.verify.verify_inclusion`."""
    proofs: list[dict[str, object]] = []
    with open(file, "rb") as src:
        head = _header.decode(src.readline())
        for raw in src:
            line = _line.decode(raw)
            row = _record(line)
            envelope = row_envelope(row)
            proofs.append(
                {
                    "format": "rota-inclusion/1",
                    "position": row.position,
                    "tree_size": head.tree_size,
                    "previous_hash": line.previous_hash,
                    "envelope": base64.b64encode(envelope).decode(),
                    "event_hash": row.hash,
                    "path": line.path,
                    "checkpoint": head.checkpoint,
                }
            )
    return proofs
