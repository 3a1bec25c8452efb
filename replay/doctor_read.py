"""Optimisation: doctor's hash-chain walk and its folds share one read of the log
(bench check_memory).

`rota doctor` walks the hash chain over every stored row (`hash_chain`) and folds its
projections from position 0 (`projection_drift` and the state checks). Each read the whole
log; here they read it once. `OneRead.read_pages` is handed to the folds
(`rebuild.fold_spilling(..., read=...)`): it reads each page of stored rows (`read_raw`),
hands the page to the chain walk as stored and, decoded as `read` decodes it (the codec
every store reads with, `DEFAULT_CODEC`), to the folds (`rebuild.PageFold`). Each check
keeps its own verdict:
- the folds stop at their last position; the walk goes on to the head;
- a page the folds cannot decode (a corrupt row) stops the folds, never the walk: their
  error is raised once the walk has finished, as their own read would have raised it;
- a row the walk finds bad ends the walk (its report names it), never the folds: they
  read on from the log themselves; an error that stops the walk (an unreadable page) is
  the walk's, and the folds read on from the log, meeting it (or not) themselves.
`chain()` is the walk's report: the one this read made, else a walk of its own (no fold
ran: the projection file could not be read, or the log could not be folded before).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rota.application.ports import EventStore, RawRecord, RecordedEvent
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.replay.audit import ChainReport, verify_chain_with
from rota.replay.progress import ProgressFactory, silent
from rota.replay.rebuild import PAGE, PageFold


def decoded(batch: Sequence[RawRecord]) -> list[RecordedEvent]:
    """Stored rows as `EventStore.read` gives them (decoded and upcast by the codec)."""
    decode = DEFAULT_CODEC.decode
    return [
        RecordedEvent(
            r.position,
            r.stream,
            r.version,
            r.delivery_id,
            r.recorded_at,
            decode(r.type, r.type_version, r.data, r.position),
        )
        for r in batch
    ]


class OneRead:
    """One read of `log` for the chain walk and the folds; see the module docstring."""

    def __init__(self, log: EventStore, progress: ProgressFactory = silent) -> None:
        self.log, self.progress = log, progress
        self.report: ChainReport | None = None
        self.error: Exception | None = None  # what stopped the walk, if anything did

    def read_pages(self, folds: PageFold) -> None:
        """Walk the chain over every stored row, handing each page, decoded, to `folds` on
        the way; then fold whatever the walk did not hand on from the log itself."""
        failed: Exception | None = None

        def rows() -> Iterator[RawRecord]:
            nonlocal failed
            position = 0
            while batch := self.log.read_raw(position, PAGE):
                if failed is None and not folds.done:
                    try:
                        folds.apply(decoded(batch))
                    except Exception as exc:  # the folds' own error, raised after the walk
                        failed = exc
                yield from batch
                position = batch[-1].position

        try:
            self.report = verify_chain_with(self.log, self.progress, records=rows())
        except Exception as exc:  # the walk's verdict (`guarded`); the folds read on
            self.error = exc
        if failed is not None:
            raise failed
        folds.read_on(self.log)

    def chain(self) -> ChainReport:
        """The walk's report (see the module docstring); what stopped it, raised."""
        if self.error is not None:
            raise self.error
        if self.report is None:
            self.report = verify_chain_with(self.log, self.progress)
        return self.report


__all__ = ["OneRead", "decoded"]
