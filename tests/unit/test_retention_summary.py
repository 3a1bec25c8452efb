"""A pruned payload: the event's summary, marked, decoded as the event with its pruned
fields at neutral values; nothing else can pass for one."""

from __future__ import annotations

import msgspec

from rota.domain.events import (
    AttemptCompleted,
    CarriedInput,
    InputAccepted,
    WorkSubmitted,
    accepted_input,
)
from rota.infrastructure.chain import is_pruned
from rota.infrastructure.codec import DEFAULT_CODEC as codec
from rota.infrastructure.retention_summary import MARKER, summary


def _summary(event: object) -> bytes | None:
    tag, version, payload = codec.encode(event)  # type: ignore[arg-type]
    return summary(codec, tag, version, payload, 7)


def test_a_summary_blanks_the_pruned_fields_and_keeps_the_rest() -> None:
    event = InputAccepted(work_id="w", key="k", payload={"secret": "x" * 100}, correlation_key="c")
    pruned = _summary(event)
    assert pruned is not None and pruned.startswith(MARKER) and is_pruned(pruned)
    back = codec.decode("core.input.accepted", 1, pruned, 7)
    assert back == InputAccepted(work_id="w", key="k", payload=None, correlation_key="c")
    assert _summary(back) is None  # its fields are neutral: nothing left to prune
    assert summary(codec, "core.input.accepted", 1, pruned, 7) is None  # already pruned


def test_outcomes_lose_their_data_and_keep_usage() -> None:
    event = AttemptCompleted(work_id="w", attempt=1, epoch=1, data={"r": 1}, usage={"t": 2.0})
    pruned = _summary(event)
    assert pruned is not None
    back = codec.decode("core.execution.completed", AttemptCompleted.version, pruned, 7)
    assert isinstance(back, AttemptCompleted)
    assert back.data is None and back.usage == {"t": 2.0} and back.attempt == 1


def test_events_with_nothing_to_prune_are_left_alone() -> None:
    assert _summary(WorkSubmitted(work_id="w", scope="root", binding="b")) is None


def test_a_definition_loses_its_carried_inputs_payload_and_keeps_its_key() -> None:
    """`input.payload` (a dotted pruned field): the first input a definition carries is
    pruned as a separate input is (its key and correlation key stay)."""
    carried = CarriedInput(key="k", payload={"secret": "x" * 100}, correlation_key="c")
    event = WorkSubmitted(work_id="w", scope="root", binding="b", kind="standing", input=carried)
    pruned = _summary(event)
    assert pruned is not None and is_pruned(pruned) and b"secret" not in pruned
    back = codec.decode("core.work.submitted", WorkSubmitted.version, pruned, 7)
    assert back == msgspec.structs.replace(
        event, input=CarriedInput(key="k", payload=None, correlation_key="c")
    )
    assert _summary(back) is None
    assert accepted_input(back) == _input_summary(carried)


def _input_summary(carried: CarriedInput) -> InputAccepted:
    """The summary a separate input with the same fields gets, decoded."""
    separate = InputAccepted(
        work_id="w", key=carried.key, payload=carried.payload, correlation_key="c"
    )
    pruned = _summary(separate)
    assert pruned is not None
    back = codec.decode("core.input.accepted", 1, pruned, 7)
    assert isinstance(back, InputAccepted)
    return back


def test_a_marker_inside_a_payload_is_not_a_pruned_row() -> None:
    _, _, payload = codec.encode(InputAccepted(work_id="w", key="k", payload={"$pruned": True}))
    assert not is_pruned(payload)
    assert not is_pruned(payload.decode())
    assert is_pruned(MARKER.decode() + '"type":"x"}')
