"""`rota.domain.retention`: a projection that saw a Work whole and then its prune holds the
Work a fold of the pruned events gives; summarizing twice changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

from rota.domain.events import (
    AttemptCompleted,
    InputAccepted,
    RetentionPruned,
    WorkSubmitted,
)
from rota.domain.evolve import evolve
from rota.domain.retention import summarize_works, summarized
from rota.domain.state import WorkState
from rota.infrastructure.codec import DEFAULT_CODEC as codec
from rota.infrastructure.retention_summary import summary

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _fold(events: list[object]) -> WorkState:
    work = None
    for position, event in enumerate(events, 1):
        work = evolve(work, event, position, AT) or work  # type: ignore[arg-type]
    assert work is not None
    return work


def _pruned(event: object) -> object:
    tag, version, payload = codec.encode(event)  # type: ignore[arg-type]
    new = summary(codec, tag, version, payload, 1)
    return event if new is None else codec.decode(tag, version, new, 1)


def test_summarized_equals_the_fold_of_the_summaries() -> None:
    claimed = [
        WorkSubmitted(work_id="w", scope="root", binding="b"),
        InputAccepted(work_id="w", key="k", payload={"big": "x" * 50}),
    ]
    whole = _fold(claimed)
    assert whole.pending and whole.pending[0].payload == {"big": "x" * 50}
    pruned = _fold([_pruned(e) for e in claimed])
    assert summarized(whole) == pruned
    assert summarized(pruned) is pruned


def test_summarize_works_names_the_rows_to_write() -> None:
    works = {"w": _fold([WorkSubmitted(work_id="w", scope="root", binding="b")])}
    event = RetentionPruned(
        policy="p",
        ranges=[[1, 1]],
        tree_size=1,
        root="00" * 32,
        archive="a",
        archive_digest="00" * 32,
        events=1,
        bytes=1,
        work_ids=["w", "gone"],
    )
    assert summarize_works(works, event) == ["work/w"]
    assert summarize_works(works, AttemptCompleted(work_id="w", attempt=1, epoch=1)) == []
