"""A log that lost events its checkpoints recorded (`log_regressed`), and putting them back.

After a failover to a replica that lacked the last commits, the log ends early or, if
something wrote on it since, forks from what its checkpoints recorded. `regressed` judges a
log against every checkpoint of its store (`rota.infrastructure.log_regression.judge`:
behind the newest, or another hash at a checkpointed position) and says which positions of
the recorded log are missing; doctor's `checkpoint` check reports it (`log_checks`).

`append_export` puts lost events back: an export of them (`rota export --from N` on a node
that still holds them, e.g. the old primary started on its own before `pg_rewind` discards
them), appended to a log that ends exactly at position N with the export's hash there
(`rota import --append`). Every row is checked as an import checks it (its position, its
hash recomputed from the previous one) and keeps its position, time and hash; nothing is
fabricated. A log that forked (other events at those positions) is refused: that needs a
person (docs/postgresql.md, "When a failover lost events").
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from rota.application.errors import PortCode, StoreError
from rota.application.ports import EventStore, RawRecord
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.log_regression import KnownHeads, Regression, judge
from rota.infrastructure.stores import redact_url
from rota.replay.checkpoint import Checkpoint
from rota.replay.export import open_export, read_header, read_records, verified
from rota.replay.progress import ProgressFactory, silent

PAGE = 1000


def regressed(log: EventStore, checkpoints: Iterable[Checkpoint]) -> Regression | None:
    """Whether `log` lacks what the checkpoints (of its own store) recorded."""
    known = KnownHeads()
    for checkpoint in checkpoints:
        known.pin(checkpoint.position, checkpoint.head_hash)
    head = log.head()

    def hash_at(position: int) -> str | None:
        if position == 0:
            return GENESIS_HEX
        rows = log.read_raw(position - 1, 1)
        return rows[0].hash if rows and rows[0].position == position else None

    return judge(head.position, head.hash, hash_at, known)


def append_export(
    path: str | os.PathLike[str], store: EventStore, *, progress: ProgressFactory = silent
) -> tuple[int, int]:
    """Append the events of a partial export (`rota export --from N`) to `store`, whose log
    must end at N with the export's hash there (or already hold a prefix of them, as an
    interrupted append left it); returns (first, last) positions appended (nothing
    appended: last < first). Refuses, before writing: another store's export, an export
    that fails verification, one that does not continue this log."""
    verified(path, "append", progress)
    where = redact_url(store.url)
    with open_export(path) as src:
        header = read_header(src)
        if header.store_id != store.store_id:
            raise StoreError(
                f"{path} is an export of store {header.store_id}, not of {where} "
                f"({store.store_id}): append only a store's own lost events",
                code=PortCode.IMPORT_MISMATCH,
            )
        head = store.head()
        start = _hash_at(store, header.from_)
        if head.position < header.from_ or start != header.previous_hash:
            raise StoreError(
                f"{path} holds the events after position {header.from_} (hash "
                f"{header.previous_hash[:16]}...), but the log of {where} "
                + (
                    f"ends at position {head.position}"
                    if head.position < header.from_
                    else f"holds hash {str(start)[:16]}... there: it does not continue it"
                )
                + "; export from the position where this log ends ('rota export --from "
                f"{head.position}')",
                code=PortCode.IMPORT_MISMATCH,
            )
        first = head.position + 1
        batch: list[RawRecord] = []
        with progress(header.head_position - head.position, "append") as bar:
            for record in read_records(src, header):
                if record.position <= head.position:
                    if _hash_at(store, record.position) != record.hash:
                        raise StoreError(
                            f"the log of {where} holds another event at position "
                            f"{record.position} than {path}: it forked, nothing was appended "
                            "(docs/postgresql.md, 'When a failover lost events')",
                            code=PortCode.IMPORT_MISMATCH,
                        )
                    continue  # appended by an earlier, interrupted run
                batch.append(record)
                if len(batch) >= PAGE:
                    store.append_raw(batch)
                    bar.advance(len(batch))
                    batch = []
            if batch:
                store.append_raw(batch)
                bar.advance(len(batch))
    return first, store.head().position


def _hash_at(store: EventStore, position: int) -> str | None:
    if position == 0:
        return GENESIS_HEX
    rows = store.read_raw(position - 1, 1)
    return rows[0].hash if rows and rows[0].position == position else None


__all__ = ["append_export", "regressed"]
