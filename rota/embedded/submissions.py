"""What one submit asks for (`rota.Submission`, the items of `Scheduler.submit_many`) and
what its append recorded (the position of the input it accepted)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from rota.application.ports import AppendResult, EventStore
from rota.domain.emit import work_stream
from rota.domain.submission import derived_input_key

INPUT_ACCEPTED = "core.input.accepted"


class Submission(msgspec.Struct, frozen=True):
    """One Work to submit, with `Scheduler.submit()`'s arguments and defaults (`input`
    left unset: no input; a run-once Work then gets an empty one)."""

    work_id: str
    binding: str
    input: Any = msgspec.UNSET
    input_key: str | None = None
    correlation_key: str | None = None
    scope: str = "root"
    kind: str = "run-once"
    trigger: str = "all"
    safety: str = "undeclared"


def submission_inputs(item: Submission) -> list[tuple[Any, str | None, str | None]]:
    """The inputs `(payload, key, correlation)` a submission accepts."""
    if item.input is not msgspec.UNSET:
        return [(item.input, item.input_key, item.correlation_key)]
    if item.kind == "run-once":
        return [(None, item.input_key or "submit", item.correlation_key)]
    return []


def input_position(
    work_id: str,
    recorded: AppendResult,
    inputs: Sequence[tuple[Any, str | None, str | None]],
    store: EventStore,
) -> int | None:
    """The log position of the input a submit's append accepted, or found already
    accepted (a retried submit's delivery identity returns the original event; a retry
    after the Work ended appends nothing, and the input's delivery is looked up)."""
    stream = work_stream(work_id)
    for event in recorded.recorded:
        if event.stream == stream and event.type == INPUT_ACCEPTED:
            return event.position
    for payload, given, _ in inputs:
        key = given if given is not None else derived_input_key(payload)
        found = store.find_delivery(f"input/{work_id}/{key}")
        if found is not None:
            return found.position
    return None


__all__ = ["Submission", "input_position", "submission_inputs"]
