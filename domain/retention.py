"""What a retention prune leaves of a Work's state: the state with its payloads blanked.

A prune replaces the payloads of a terminal Work's events by their summaries (each event's
`pruned_fields` at neutral values). A fold of the summaries gives the Work with its
attempts' results and recovery metadata and its pending inputs' payloads at None; a
projection that saw the originals gets there by applying `core.retention.pruned`, which
blanks the same fields of the Works it names. Either way the Work's state is the same, so a
projection rebuilt from the pruned log equals the one maintained live (same digest).
"""

from __future__ import annotations

import operator
from collections.abc import MutableMapping

from msgspec.structs import replace

from rota.domain.events import Event, RetentionPruned
from rota.domain.state import AttemptState, PendingInput, WorkState


def summarize_works(works: MutableMapping[str, WorkState], event: Event) -> list[str]:
    """Apply a `core.retention.pruned` event to a projection's Works: each Work it names
    is summarized; returns the row keys (`work/<id>`) to write again. Every named Work's
    row is written, even one found summarized already: a store may find a quiet Work by
    folding its (pruned) stream rather than reading its old row, which still holds the
    payloads."""
    if not isinstance(event, RetentionPruned):
        return []
    keys = []
    for work_id in event.work_ids:
        work = works.get(work_id)
        if work is not None:
            works[work_id] = summarized(work)
            keys.append(f"work/{work_id}")
    for part in event.partial:
        work = works.get(part.work_id)
        if work is not None:
            works[part.work_id] = summarized_part(work, set(part.attempts), set(part.inputs))
            keys.append(f"work/{part.work_id}")
    return keys


def summarized_part(work: WorkState, attempts: set[int], inputs: set[int]) -> WorkState:
    """`work` as a fold gives it once the rows of its `attempts` (outcomes, recovery
    metadata) and the inputs at positions `inputs` are summarized; the rest stays."""

    def blank(items: tuple[PendingInput, ...]) -> tuple[PendingInput, ...]:
        return tuple(
            replace(i, payload=None) if i.position in inputs and i.payload is not None else i
            for i in items
        )

    def part(a: AttemptState) -> AttemptState:
        # Most attempts of a standing Work are outside the prune (or summarized by an
        # earlier one): kept as they are, without a copy (a prune's cost stays per attempt
        # it changes, not per attempt the Work ever had).
        trigger, consumed = a.trigger, a.consumed
        blank_trigger = (
            trigger is not None and trigger.payload is not None and trigger.position in inputs
        )
        blank_consumed = any(i.payload is not None and i.position in inputs for i in consumed)
        if not (blank_trigger or blank_consumed or a.number in attempts):
            return a
        if blank_trigger:
            assert trigger is not None
            trigger = replace(trigger, payload=None)
        if a.number in attempts:
            a = replace(a, data=None, recovery_metadata=None)
        return replace(a, consumed=blank(consumed) if blank_consumed else consumed, trigger=trigger)

    return replace(
        work, attempts=tuple(part(a) for a in work.attempts), pending=blank(work.pending)
    )


def summarized(work: WorkState) -> WorkState:
    """`work` as a fold of its pruned events gives it."""
    attempts = tuple(_attempt(a) for a in work.attempts)
    pending = _inputs(work.pending)
    if all(map(operator.is_, attempts, work.attempts)) and pending is work.pending:
        return work
    return replace(work, attempts=attempts, pending=pending)


def _inputs(items: tuple[PendingInput, ...]) -> tuple[PendingInput, ...]:
    if all(i.payload is None for i in items):
        return items
    return tuple(i if i.payload is None else replace(i, payload=None) for i in items)


def _attempt(attempt: AttemptState) -> AttemptState:
    consumed = _inputs(attempt.consumed)
    trigger = attempt.trigger
    if trigger is not None and trigger.payload is not None:
        trigger = replace(trigger, payload=None)
    if (
        attempt.data is None
        and attempt.recovery_metadata is None
        and consumed is attempt.consumed
        and trigger is attempt.trigger
    ):
        return attempt
    return replace(attempt, data=None, recovery_metadata=None, consumed=consumed, trigger=trigger)
