"""The codec: one union, explicit tags, precise errors, upcasting of old versions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.application.errors import CorruptRecord
from rota.domain.events import (
    ALL_EVENTS,
    AttemptClaimed,
    CarriedInput,
    Event,
    InputAccepted,
    Invoked,
    WorkSubmitted,
)
from rota.domain.policy import Binding, Pinned, Registration, RetryPolicy
from rota.domain.upcasting import ADDITIVE, upcast
from rota.infrastructure.codec import DEFAULT_CODEC, Codec, lean_builtins

PINNED = Pinned(
    generation="g",
    binding=Binding(name="b", executor="e"),
    registration=Registration(name="e"),
    timeout_seconds=60.0,
    lease_seconds=30.0,
    max_segments=50,
)


def test_encode_gives_tag_version_and_readable_json() -> None:
    event = WorkSubmitted(work_id="a", scope="root/team", binding="report")
    tag, version, data = DEFAULT_CODEC.encode(event)
    assert (tag, version) == ("core.work.submitted", 3)
    assert msgspec.json.decode(data)["type"] == "core.work.submitted"
    assert DEFAULT_CODEC.decode(tag, version, data.decode()) == event


def test_a_definition_of_version_2_reads_without_a_carried_input() -> None:
    """Version 3 may carry the first input; a version 2 row (every row an older rota wrote)
    reads as `input` null, through the codec's direct path for additive versions."""
    v2 = {"type": "core.work.submitted", "work_id": "a", "scope": "root", "binding": "report"}
    v2 |= {"kind": "run-once", "trigger": "all", "safety": "undeclared", "grants": []}
    decoded = DEFAULT_CODEC.decode(
        "core.work.submitted", 2, msgspec.json.encode(v2 | {"flow": None})
    )
    assert decoded == WorkSubmitted(work_id="a", scope="root", binding="report")
    assert isinstance(decoded, WorkSubmitted) and decoded.input is None
    carried = WorkSubmitted(
        work_id="a", scope="root", binding="report", input=CarriedInput(key="k", payload={"n": 1})
    )
    tag, version, data = DEFAULT_CODEC.encode(carried)
    # Version 3 leaves out the fields at their defaults (a null correlation key too).
    assert msgspec.json.decode(data) == {
        "type": "core.work.submitted",
        "work_id": "a",
        "scope": "root",
        "binding": "report",
        "input": {"key": "k", "payload": {"n": 1}},
    }
    assert DEFAULT_CODEC.decode(tag, version, data) == carried


def test_a_claim_of_version_1_reads_without_an_invoke_marker() -> None:
    claim = AttemptClaimed(
        work_id="a",
        attempt=1,
        epoch=1,
        owner="h",
        lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
        deadline=datetime(2026, 1, 1, 1, tzinfo=UTC),
        consumed=[2],
        trigger=2,
        pinned=PINNED,
    )
    tag, version, data = DEFAULT_CODEC.encode(claim)
    assert (tag, version) == ("core.execution.claimed", 2)
    old = msgspec.json.decode(data)
    assert "invoked" not in old and "passes" not in old  # (defaults are left out)
    old |= {"passes": [], "grants": []}  # what version 1 wrote
    assert DEFAULT_CODEC.decode(tag, 1, msgspec.json.encode(old)) == claim
    marked = msgspec.structs.replace(claim, invoked=Invoked(isolated=True))
    assert msgspec.json.decode(DEFAULT_CODEC.encode(marked)[2])["invoked"] == {"isolated": True}
    assert DEFAULT_CODEC.decode(tag, version, DEFAULT_CODEC.encode(marked)[2]) == marked


def test_the_additive_upcasters_leave_the_payload_as_it_is() -> None:
    """The new versions only add a field with a default: their upcasters are identities
    (the chain gives what the direct decode gives)."""
    payload = {"type": "core.work.submitted", "work_id": "a", "scope": "r", "binding": "b"}
    assert upcast("core.work.submitted", 2, 3, dict(payload)) == payload
    assert ("core.work.submitted", 2) in ADDITIVE and ("core.execution.claimed", 1) in ADDITIVE
    # A codec without the direct path (no additive steps) decodes old rows the same way.
    chained = Codec(additive=frozenset())
    row = msgspec.json.encode({**payload, "flow": None})
    assert chained.decode("core.work.submitted", 2, row) == DEFAULT_CODEC.decode(
        "core.work.submitted", 2, row
    )


def test_a_plain_submit_writes_no_flow_fields_and_version_1_is_upcast() -> None:
    plain = WorkSubmitted(work_id="a", scope="root", binding="report")
    assert "flow" not in msgspec.json.decode(DEFAULT_CODEC.encode(plain)[2])  # (null: left out)
    # Version 1 as flow control first wrote it (flat), and as rota wrote it before.
    flat = {"type": "core.work.submitted", "work_id": "a", "scope": "root", "binding": "report"}
    at_defaults = {**flat, "priority": 0, "keys": [], "cost": 1, "throttle": None}
    asked = {**flat, "priority": 5, "keys": ["tenant:a"], "cost": 2, "throttle": None}
    for payload in (flat, at_defaults):
        assert DEFAULT_CODEC.decode("core.work.submitted", 1, msgspec.json.encode(payload)) == plain
    upcast = DEFAULT_CODEC.decode("core.work.submitted", 1, msgspec.json.encode(asked))
    assert isinstance(upcast, WorkSubmitted)
    flow = (upcast.priority, upcast.keys, upcast.cost, upcast.throttle)
    assert flow == (5, ("tenant:a",), 2, None)


def test_every_tag_is_dotted_and_unique() -> None:
    tags = [t.tag() for t in ALL_EVENTS]
    assert len(tags) == len(set(tags))
    for tag in tags:
        assert tag.count(".") >= 2 and tag == tag.lower(), tag


def test_unknown_tag_names_position_tag_and_version() -> None:
    with pytest.raises(CorruptRecord) as caught:
        DEFAULT_CODEC.decode("core.nope.happened", 1, "{}", position=42)
    message = str(caught.value)
    assert "position 42" in message and "'core.nope.happened'" in message
    assert "version 1" in message
    assert caught.value.code == "unknown_event_type"
    assert (caught.value.position, caught.value.type, caught.value.type_version) == (
        42,
        "core.nope.happened",
        1,
    )


def test_version_newer_than_known_is_refused() -> None:
    with pytest.raises(CorruptRecord) as caught:
        DEFAULT_CODEC.decode("core.work.submitted", 7, "{}", position=3)
    assert caught.value.code == "unknown_event_version"
    assert "newer rota" in str(caught.value) and "position 3" in str(caught.value)


def test_payload_that_does_not_fit_names_the_field() -> None:
    data = b'{"type":"core.work.submitted","work_id":5,"scope":"r","binding":"b"}'
    with pytest.raises(CorruptRecord) as caught:
        DEFAULT_CODEC.decode("core.work.submitted", 1, data, position=9)
    assert "$.work_id" in str(caught.value) and "position 9" in str(caught.value)


def test_payload_whose_tag_disagrees_with_the_type_column_is_refused() -> None:
    data = DEFAULT_CODEC.encode_payload(WorkSubmitted(work_id="a", scope="r", binding="b"))
    with pytest.raises(CorruptRecord, match="carries tag"):
        DEFAULT_CODEC.decode("core.input.accepted", 1, data, position=1)


def test_invalid_json_is_refused() -> None:
    with pytest.raises(CorruptRecord, match="not valid JSON"):
        DEFAULT_CODEC.decode("core.work.submitted", 1, b"{oops", position=1)


class RenamedV2(Event, tag="test.thing.renamed", frozen=True, kw_only=True):
    """A v2 event whose v1 called `name` `title` and had no `count`."""

    version: ClassVar[int] = 2
    name: str
    count: int


def _v1_to_v2(payload: dict[str, object]) -> dict[str, object]:
    upgraded = dict(payload)
    upgraded["name"] = upgraded.pop("title")
    upgraded["count"] = 0
    return upgraded


def test_a_v1_fixture_is_upcast_to_the_current_shape() -> None:
    codec = Codec([*ALL_EVENTS, RenamedV2], {("test.thing.renamed", 1): _v1_to_v2})
    v1_fixture = b'{"type":"test.thing.renamed","title":"old"}'
    assert codec.decode("test.thing.renamed", 1, v1_fixture, position=1) == RenamedV2(
        name="old", count=0
    )
    current = codec.encode(RenamedV2(name="new", count=2))
    assert current[:2] == ("test.thing.renamed", 2)


def test_a_missing_upcaster_is_named() -> None:
    codec = Codec([*ALL_EVENTS, RenamedV2], {})
    with pytest.raises(CorruptRecord, match=r"no upcaster for test\.thing\.renamed v1 -> v2"):
        codec.decode("test.thing.renamed", 1, b'{"type":"test.thing.renamed"}', position=5)


def test_a_tag_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        Codec([WorkSubmitted, WorkSubmitted])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(
    work=st.text(min_size=1),
    key=st.text(),
    payload=json_values,
)
def test_round_trip_any_input(work: str, key: str, payload: object) -> None:
    event = InputAccepted(work_id=work, key=key, payload=payload)
    tag, version, data = DEFAULT_CODEC.encode(event)
    assert DEFAULT_CODEC.decode(tag, version, data.decode()) == event


def test_an_appends_own_rows_decode_in_one_call_as_they_would_one_by_one() -> None:
    events = [
        WorkSubmitted(work_id="a", scope="r", binding="b"),
        InputAccepted(work_id="a", key="k", payload={"n": 1.5, "list": [1, "x"]}),
        WorkSubmitted(work_id="b", scope="r", binding="c"),
    ]
    rows = [(*DEFAULT_CODEC.encode(e), p) for p, e in enumerate(events, start=1)]
    assert DEFAULT_CODEC.decode_written(rows) == [DEFAULT_CODEC.decode(*row) for row in rows]
    assert DEFAULT_CODEC.decode_written(rows) == events
    assert DEFAULT_CODEC.decode_written([]) == []


def test_a_written_row_whose_tag_disagrees_fails_as_one_by_one_does() -> None:
    # The batch's check of each event against its type column: the row is decoded alone,
    # and refused with its position, as `decode` refuses it.
    good = (*DEFAULT_CODEC.encode(WorkSubmitted(work_id="a", scope="r", binding="b")), 1)
    data = DEFAULT_CODEC.encode_payload(WorkSubmitted(work_id="b", scope="r", binding="b"))
    with pytest.raises(CorruptRecord, match=r"event at position 2 .* carries tag"):
        DEFAULT_CODEC.decode_written([good, ("core.input.accepted", 1, data, 2)])
    with pytest.raises(CorruptRecord, match=r"event at position 3 .* not valid JSON"):
        DEFAULT_CODEC.decode_written([good, ("core.work.submitted", 1, b"{oops", 3)])


def test_a_written_row_of_an_older_version_is_upcast() -> None:
    codec = Codec([*ALL_EVENTS, RenamedV2], {("test.thing.renamed", 1): _v1_to_v2})
    v1 = b'{"type":"test.thing.renamed","title":"old"}'
    current = (*codec.encode(RenamedV2(name="new", count=2)), 2)
    assert codec.decode_written([("test.thing.renamed", 1, v1, 1), current]) == [
        RenamedV2(name="old", count=0),
        RenamedV2(name="new", count=2),
    ]


def test_a_claim_writes_its_pinned_binding_without_defaults_and_reads_it_whole() -> None:
    """`lean_fields`: the pinned snapshot's fields at their defaults are left out at every
    depth; decoding fills them back, so the claim reads as it was given."""
    claim = AttemptClaimed(
        work_id="a",
        attempt=1,
        epoch=1,
        owner="h",
        lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
        deadline=datetime(2026, 1, 1, 1, tzinfo=UTC),
        consumed=[2],
        trigger=2,
        pinned=PINNED,
    )
    tag, version, data = DEFAULT_CODEC.encode(claim)
    assert msgspec.json.decode(data)["pinned"] == {
        "generation": "g",
        "binding": {"name": "b", "executor": "e"},
        "registration": {"name": "e"},
        "timeout_seconds": 60.0,
        "lease_seconds": 30.0,
    }
    assert DEFAULT_CODEC.decode(tag, version, data) == claim
    assert DEFAULT_CODEC.encode_many([claim]) == [(tag, version, data)]
    # A value other than the default is written, of whatever type it is.
    other = msgspec.structs.replace(
        PINNED,
        max_segments=7,
        binding=Binding(name="b", executor="e", retry=RetryPolicy(max_attempts=1)),
    )
    pinned = msgspec.json.decode(
        DEFAULT_CODEC.encode_payload(msgspec.structs.replace(claim, pinned=other))
    )["pinned"]
    assert pinned["max_segments"] == 7 and pinned["binding"]["retry"] == {"max_attempts": 1}


def test_lean_builtins_leaves_out_only_a_default_of_its_own_type() -> None:
    retry = RetryPolicy()
    assert lean_builtins(retry) == {}
    # 0 is not False, 1 is not 1.0: written, so they read back as they were given.
    odd = msgspec.structs.replace(PINNED, max_segments=50.0)  # type: ignore[arg-type]
    assert lean_builtins(odd)["max_segments"] == 50.0
    tagged = WorkSubmitted(work_id="a", scope="root", binding="b")
    assert lean_builtins(tagged) == {
        "type": "core.work.submitted",
        "work_id": "a",
        "scope": "root",
        "binding": "b",
    }


def test_an_events_view_shows_every_field_whichever_version_wrote_it() -> None:
    """`rota events`, the HTTP API and `Scheduler.events()` show an event with its fields at
    their defaults too: the same view of a definition or a claim as before version 3/2."""
    from rota.application.queries.work_views import event_data

    older = InputAccepted(work_id="w", key="k", payload={"n": [1, 2]})
    assert event_data(older) == msgspec.to_builtins(older)
    defined = WorkSubmitted(work_id="a", scope="root", binding="b")
    shown = event_data(defined)
    assert shown == {
        "type": "core.work.submitted",
        "work_id": "a",
        "scope": "root",
        "binding": "b",
        "kind": "run-once",
        "trigger": "all",
        "safety": "undeclared",
        "grants": [],
        "flow": None,
        "input": None,
    }
    claim = AttemptClaimed(
        work_id="a",
        attempt=1,
        epoch=1,
        owner="h",
        lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
        deadline=datetime(2026, 1, 1, 1, tzinfo=UTC),
        consumed=[2],
        trigger=2,
        pinned=PINNED,
        invoked=Invoked(isolated=False),
    )
    full = event_data(claim)
    assert full["pinned"] == msgspec.to_builtins(PINNED) and full["passes"] == []
    assert full["lease_expires_at"] == "2026-01-01T00:00:00Z"
    assert full["invoked"] == {"isolated": False}
