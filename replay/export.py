"""Export and import: the log as JSON lines, verifiable offline, loadable into another store.

The file is a header line, then one line per event in position order:

    {"rota_export":1,"store_id":S,"from":N,"previous_hash":H0,"head_position":P,"head_hash":H}
    {"position":N+1,"stream":...,"version":...,"type":...,"type_version":...,
     "delivery_id":...,"recorded_at":...,"data":<payload>,"data_encoding":"text","hash":...}

`data` is the stored payload exactly as stored: its JSON text as a string
(`data_encoding` "text"), or base64 of a byte payload ("base64"). `from` N > 0 exports the
events after position N; `previous_hash` is then the stored hash at position N (the genesis
hash, 64 zeros, for a whole log), so the part can be verified on its own and against a
checkpoint. `head_position`/`head_hash` are the last exported event's: a file cut short or
extended does not match its header.

`verify_export` checks a file offline (the chain, stream continuity, the header).
`import_export` loads a whole-log export into an empty store, after verifying it and
before writing anything; rows keep their positions, times and hashes, so the new store's
chain head equals the old one's. It is how an embedded SQLite deployment moves to
PostgreSQL. Files are streamed: memory stays bounded whatever their size. A line over
1 MiB is refused, as is a line that is not valid JSON (both named by line number).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO, Literal

import msgspec

from rota.application.errors import PortCode, StoreError
from rota.application.ports import EventStore, RawRecord
from rota.domain.errors import RotaError
from rota.infrastructure.atomic_file import atomic_write
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.config import EntryCode
from rota.infrastructure.retention_summary import is_pruned
from rota.infrastructure.stores import redact_url
from rota.replay.audit import (
    ChainReport,
    Checkpoints,
    iter_raw,
    verify_chain_with,
    verify_records,
)
from rota.replay.checkpoint import HASH_RE
from rota.replay.errors import ReplayCode
from rota.replay.progress import ProgressFactory, silent
from rota.replay.retention_audit import Prune, prunes_in

if TYPE_CHECKING:
    from rota.replay.retention_archive import Archive

EXPORT_VERSION = 1
MAX_LINE = 1 << 20
IMPORT_PAGE = 1000


class ExportError(RotaError):
    """An export file cannot be read as one (`line` names where)."""

    code = ReplayCode.INVALID_EXPORT

    def __init__(self, message: str, *, line: int, position: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.position = position


class ExportHeader(msgspec.Struct, frozen=True):
    rota_export: int
    store_id: str
    from_: int = msgspec.field(name="from")
    previous_hash: str
    head_position: int
    head_hash: str


class ExportLine(msgspec.Struct, frozen=True):
    position: int
    stream: str
    version: int
    type: str
    type_version: int
    delivery_id: str | None
    recorded_at: str
    data: str
    data_encoding: Literal["text", "base64"]
    hash: str


_encoder = msgspec.json.Encoder()
_header_decoder = msgspec.json.Decoder(ExportHeader)
_line_decoder = msgspec.json.Decoder(ExportLine)


# -- writing -----------------------------------------------------------------------------


def export(
    store: EventStore,
    out: BinaryIO,
    *,
    after: int = 0,
    progress: ProgressFactory = silent,
    archive: Archive | None = None,
) -> ExportHeader:
    """Write the events after position `after` (up to the head now) as JSON lines.

    A row a retention prune rewrote is written as stored (its summary, marked `$pruned`),
    unless `archive` holds its original, whose hash is checked (`retention_archive`)."""
    head = store.head()
    if after < 0 or after > head.position:
        raise RotaError(
            f"--from {after}: the log holds positions 1..{head.position}", code=EntryCode.USAGE
        )
    previous = GENESIS_HEX
    if after:
        (row,) = store.read_raw(after - 1, 1)
        previous = row.hash
    header = ExportHeader(EXPORT_VERSION, store.store_id, after, previous, head.position, head.hash)
    out.write(_encoder.encode(header) + b"\n")
    with progress(head.position - after, "export") as bar:
        for record in bar.track(iter_raw(store, after=after)):
            if record.position > head.position:
                break
            row = record
            if archive is not None and is_pruned(record.data):
                row = archive.restore(previous, record) or record
            out.write(_encoder.encode(_line(row)) + b"\n")
            previous = record.hash
    return header


def _line(record: RawRecord) -> ExportLine:
    data = record.data
    if isinstance(data, str):
        text, encoding = data, "text"
    else:
        text, encoding = base64.b64encode(bytes(data)).decode("ascii"), "base64"
    return ExportLine(
        record.position,
        record.stream,
        record.version,
        record.type,
        record.type_version,
        record.delivery_id,
        record.recorded_at,
        text,
        encoding,  # type: ignore[arg-type]
        record.hash,
    )


def export_line(record: RawRecord) -> ExportLine:
    """A stored row as its export line (what a prune's archive writes too)."""
    return _line(record)


def export_to_file(
    store: EventStore,
    path: str | os.PathLike[str],
    *,
    after: int = 0,
    progress: ProgressFactory = silent,
    archive: Archive | None = None,
) -> ExportHeader:
    """Export into a file, atomically (a tmp file renamed into place once complete)."""
    with atomic_write(path) as out:
        header = export(store, out, after=after, progress=progress, archive=archive)
    return header


# -- reading -----------------------------------------------------------------------------


def _lines(src: BinaryIO, after: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, line); `after`: the export's `from`, to name a bad line's position."""
    number = 0 if after is None else 1
    while line := src.readline(MAX_LINE + 1):
        number += 1
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            position = None if after is None else after + number - 1
            raise ExportError(f"line {number} is longer than 1 MiB", line=number, position=position)
        yield number, line


def read_header(src: BinaryIO) -> ExportHeader:
    """Read and check the first line."""
    for _, line in _lines(src):
        try:
            header = _header_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ExportError(f"line 1: not an export header: {exc}", line=1) from None
        if header.rota_export != EXPORT_VERSION:
            raise ExportError(
                f"line 1: export format {header.rota_export} is not supported "
                f"(this rota reads format {EXPORT_VERSION})",
                line=1,
            )
        if not (HASH_RE.fullmatch(header.previous_hash) and HASH_RE.fullmatch(header.head_hash)):
            raise ExportError("line 1: previous_hash and head_hash must be 64 hex digits", line=1)
        if not 0 <= header.from_ <= header.head_position:
            raise ExportError("line 1: from and head_position are out of order", line=1)
        return header
    raise ExportError("the file is empty: no export header", line=1)


def read_records(src: BinaryIO, header: ExportHeader) -> Iterator[RawRecord]:
    """The rows after the header line; raises `ExportError` at a bad line."""
    position = header.from_
    for number, line in _lines(src, after=header.from_):
        position += 1
        try:
            item = _line_decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise ExportError(
                f"line {number}: not a valid export line: {exc}", line=number, position=position
            ) from None
        data: str | bytes = item.data
        if item.data_encoding == "base64":
            try:
                data = base64.b64decode(item.data, validate=True)
            except (binascii.Error, ValueError):
                raise ExportError(
                    f"line {number}: data is not valid base64", line=number, position=position
                ) from None
        yield RawRecord(
            item.position,
            item.stream,
            item.version,
            item.type,
            item.type_version,
            item.delivery_id,
            data,
            item.recorded_at,
            item.hash,
        )


def open_export(path: str | os.PathLike[str]) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise ExportError(f"cannot read {path}: {exc.strerror}", line=0) from None


def export_total(path: str | os.PathLike[str]) -> int:
    """How many events the file's header announces (for a progress bar)."""
    with open_export(path) as src:
        header = read_header(src)
    return header.head_position - header.from_


def verify_export(
    path: str | os.PathLike[str],
    *,
    checkpoint: Checkpoints = None,
    progress: ProgressFactory = silent,
) -> ChainReport:
    """Verify an export offline: its chain, stream continuity, header, and checkpoints."""
    with open_export(path) as src:
        try:
            header = read_header(src)
        except ExportError as exc:
            return ChainReport(False, 0, 0, GENESIS_HEX, None, str(exc))
        failure: list[ExportError] = []
        prunes = _prunes(path)

        def rows() -> Iterator[RawRecord]:
            try:
                yield from read_records(src, header)
            except ExportError as exc:
                failure.append(exc)

        with progress(header.head_position - header.from_, "verify") as bar:
            report = verify_records(
                bar.track(rows()),
                after=header.from_,
                previous_hash=header.previous_hash,
                checkpoint=checkpoint,
                store_id=header.store_id,
                prunes=prunes,
            )
    if failure:  # the rows before the bad line were fine, or the chain would have stopped
        error = failure[0]
        return msgspec.structs.replace(
            report, ok=False, first_bad_position=error.position, reason=str(error)
        )
    if report.ok and report.head_position != header.head_position:
        return msgspec.structs.replace(
            report,
            ok=False,
            first_bad_position=min(report.head_position, header.head_position) + 1,
            reason=f"the export ends at position {report.head_position} but its header says "
            f"{header.head_position}: the file was cut short or extended",
        )
    if report.ok and report.head_hash != header.head_hash:
        return msgspec.structs.replace(
            report,
            ok=False,
            first_bad_position=header.head_position,
            reason="the chain's head hash is not the header's head_hash: the header was edited",
        )
    return report


def verified(path: str | os.PathLike[str], verb: str, progress: ProgressFactory) -> None:
    """Refuse (`ExportError`) to `verb` an export that fails verification."""
    report = verify_export(path, progress=progress)
    if not report.ok:
        where = f"position {report.first_bad_position}: " if report.first_bad_position else ""
        raise ExportError(
            f"refusing to {verb} {path}: {where}{report.reason}",
            line=0,
            position=report.first_bad_position,
        )


def _prunes(path: str | os.PathLike[str]) -> list[Prune]:
    """The prunes an export records (a first pass over the file; none if it is unreadable:
    the verifying pass then names the bad line). Only a regular file is read twice: a pipe
    (an import fed through a FIFO) has no prunes read ahead, so a pruned row in it fails."""
    if not os.path.isfile(path):
        return []
    with open_export(path) as src:
        try:
            return prunes_in(read_records(src, read_header(src)))
        except (ExportError, RotaError):
            return []


def import_export(
    path: str | os.PathLike[str],
    store: EventStore,
    *,
    page: int = IMPORT_PAGE,
    progress: ProgressFactory = silent,
) -> ChainReport:
    """Load a whole-log export into an empty store; return the store's verified chain.

    Refuses, before writing anything: a store that is not empty (`store_not_empty`), a file
    that fails `verify_export` (`invalid_export`), a partial export (`partial_export`).
    Marks the store unfinished (`EventStore.mark_import`: every other open refuses it,
    `import_incomplete`), writes pages of `page` rows, each in one transaction
    (`EventStore.append_raw`), verifies the store's chain ends at the export's head hash
    (`import_mismatch`), and only then clears the mark. A store an interrupted import of
    this same export left marked is resumed after its last page; one marked by another
    export's import is refused (`import_incomplete`).
    """
    head = store.head()
    marker = _unfinished(store)
    if head.position and marker is None:
        raise StoreError(
            f"the target store {redact_url(store.url)} already holds {head.position} events; "
            "import only into an empty store",
            code=ReplayCode.STORE_NOT_EMPTY,
        )
    verified(path, "import", progress)
    with open_export(path) as src:
        header = read_header(src)
        if header.from_:
            raise RotaError(
                f"refusing to import {path}: it holds only the events after position "
                f"{header.from_}; import a whole-log export (without --from)",
                code=ReplayCode.PARTIAL_EXPORT,
            )
        wanted = import_marker(header)
        if marker is not None and marker != wanted:
            raise StoreError(
                f"the target store {redact_url(store.url)} holds an unfinished import of "
                f"another export ({head.position} events of one whose head is {marker}), not "
                f"of {path}: import that export again to finish it, or import into a new store",
                code=ReplayCode.IMPORT_INCOMPLETE,
            )
        if marker is None:
            _mark(store, wanted)
        with progress(header.head_position - head.position, "import") as bar:
            batch: list[RawRecord] = []
            for record in read_records(src, header):
                if record.position <= head.position:
                    continue  # written by the interrupted import this one resumes
                batch.append(record)
                if len(batch) >= page:
                    _write(store, batch)
                    bar.advance(len(batch))
                    batch = []
            if batch:
                _write(store, batch)
                bar.advance(len(batch))
    final = verify_chain_with(store, progress)
    if not final.ok or (final.head_position, final.head_hash) != (
        header.head_position,
        header.head_hash,
    ):
        raise StoreError(
            f"after importing {path}, the store's chain is not the export's "
            f"(store head {final.head_position} {final.head_hash}, export head "
            f"{header.head_position} {header.head_hash}; {final.reason or 'no chain error'})",
            code=PortCode.IMPORT_MISMATCH,
        )
    store.mark_import(None)
    return final


def import_marker(header: ExportHeader) -> str:
    """What an unfinished import of this export leaves in the store: its head."""
    return f"{header.head_position} {header.head_hash}"


def _unfinished(store: EventStore) -> str | None:
    try:
        return store.unfinished_import()
    except NotImplementedError:
        return None


def _mark(store: EventStore, marker: str) -> None:
    try:
        store.mark_import(marker)
    except NotImplementedError as exc:
        raise StoreError(
            f"the store {redact_url(store.url)} cannot import yet: {exc}",
            code=ReplayCode.IMPORT_UNSUPPORTED,
        ) from None


def _write(store: EventStore, batch: list[RawRecord]) -> None:
    store.append_raw(batch)
