"""An append hands back the events it was given only when they are canonical: exactly, type
by type, what decoding their payload gives back (`rota.infrastructure.canonical`).

The property: for every event type, with field values drawn from the annotation's own type
and from its near misses (an int for a float, a bool for an int, a tuple for a list, a
non-UTC or naive time, NaN, payload containers), an event the check passes decodes to an
event equal to it in every value and every type. And every event that decoding gives back
(the golden histories) passes it, so the appends skip the decode for all of them.
"""

from __future__ import annotations

import json
import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rota.domain.events import (
    ALL_EVENTS,
    AttemptClaimed,
    AttemptParked,
    Event,
    InputAccepted,
    LeaseRenewed,
    WorkSubmitted,
)
from rota.infrastructure.canonical import canonical_check
from rota.infrastructure.codec import DEFAULT_CODEC

HISTORIES = Path(__file__).parent.parent / "histories"
CHECKS: dict[type, Any] = {}  # fresh checks (no value seen yet), one per event class


class Text(str):
    """A str subclass: encodes as a str, decodes as a plain `str`."""


def _same(a: Any, b: Any) -> bool:
    """Equal in every value and every type, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, msgspec.Struct):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, datetime):
        return a == b and a.tzinfo is b.tzinfo and a.fold == b.fold
    return bool(a == b)


texts = st.text(max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | (st.integers() | st.sampled_from([2**64, -(2**70), 10**400]))
    | st.floats()
    | texts
)
json_like = st.recursive(
    json_scalars | st.builds(Text, texts),
    lambda inner: (
        st.lists(inner, max_size=3) | st.tuples(inner) | st.dictionaries(texts, inner, max_size=3)
    ),
    max_leaves=6,
)
times = (
    st.datetimes(
        timezones=st.sampled_from([UTC, timezone(timedelta(0)), timezone(timedelta(hours=2))])
    )
    | st.datetimes()
)


def values(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of `annotation`'s type and its near misses."""
    if annotation is Any:
        return json_like
    if annotation is str:
        return texts | st.builds(Text, texts)
    if annotation is int:
        return (st.integers() | st.sampled_from([2**64, -(2**70), 10**400])) | st.booleans()
    if annotation is bool:
        return st.booleans() | st.integers(0, 1)
    if annotation is float:
        return st.floats() | st.integers(-1000, 1000)
    if annotation is None or annotation is type(None):
        return st.none()
    if annotation is datetime:
        return times
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return structs(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return st.sampled_from(args) | texts
    if origin is Union or origin is types.UnionType:
        return st.one_of([values(arg) for arg in args])
    if origin is list or origin is tuple:
        items = st.lists(values(args[0]), max_size=3)
        return items | items.map(tuple)
    if origin is dict:
        return st.dictionaries(texts, values(args[1]), max_size=3)
    raise AssertionError(f"no strategy for {annotation!r}")


def structs(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f: values(hints[f]) for f in cls.__struct_fields__})


@pytest.mark.parametrize("cls", ALL_EVENTS, ids=lambda cls: cls.tag())
@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_an_event_the_check_passes_decodes_as_itself(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(structs(cls))
    check = CHECKS.setdefault(cls, canonical_check(cls))
    try:
        tag, version, payload = DEFAULT_CODEC.encode(event)
    except (TypeError, ValueError, msgspec.EncodeError):
        return  # never written: the append refuses it before anything is stored
    if check(event):
        assert _same(DEFAULT_CODEC.decode(tag, version, payload), event)


@pytest.mark.parametrize("cls", ALL_EVENTS, ids=lambda cls: cls.tag())
@settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_a_decoded_event_whose_payloads_are_scalars_is_canonical(
    cls: type[Event], data: st.DataObject
) -> None:
    event = data.draw(structs(cls))
    try:
        tag, version, payload = DEFAULT_CODEC.encode(event)
        decoded = DEFAULT_CODEC.decode(tag, version, payload)
    except Exception:
        return
    check = CHECKS.setdefault(cls, canonical_check(cls))
    if check(event):
        assert check(decoded)
    if not _any_container(decoded) and not _time_off_utc(decoded):
        assert check(decoded), decoded


def _any_container(value: Any) -> bool:
    """Whether an untyped field anywhere in `value` holds a list or dict (never canonical:
    the caller may still hold it)."""
    if isinstance(value, msgspec.Struct):
        hints = typing.get_type_hints(type(value))
        for f in value.__struct_fields__:
            inner = getattr(value, f)
            if hints[f] is Any and isinstance(inner, list | dict):
                return True
            if _any_container(inner):
                return True
    if isinstance(value, list | tuple):
        return any(_any_container(x) for x in value)
    if isinstance(value, dict):
        return any(_any_container(x) for x in value.values())
    return False


def _time_off_utc(value: Any) -> bool:
    """Whether a time anywhere in `value` is naive or not in UTC (rota writes UTC times;
    another one is decoded, not handed back)."""
    if isinstance(value, msgspec.Struct):
        return any(_time_off_utc(getattr(value, f)) for f in value.__struct_fields__)
    if isinstance(value, list | tuple):
        return any(_time_off_utc(x) for x in value)
    return isinstance(value, datetime) and value.tzinfo is not UTC


def test_a_nested_value_is_checked_unless_it_is_the_last_one_seen_canonical() -> None:
    claimed = next(e for e in _golden_events() if isinstance(e, AttemptClaimed))
    assert DEFAULT_CODEC.canonical(claimed)
    assert DEFAULT_CODEC.canonical(claimed)  # the same pinned binding: not walked again
    binding = msgspec.structs.replace(claimed.pinned.binding, timeout_seconds=30)  # an int
    pinned = msgspec.structs.replace(claimed.pinned, binding=binding)
    assert not DEFAULT_CODEC.canonical(msgspec.structs.replace(claimed, pinned=pinned))
    assert DEFAULT_CODEC.canonical(claimed)


def _golden_events() -> list[Event]:
    events = []
    for path in sorted(HISTORIES.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "type" in row:  # not the export's header
                events.append(DEFAULT_CODEC.decode(row["type"], row["type_version"], row["data"]))
    return events


def test_every_event_of_the_golden_histories_without_payload_containers_is_canonical() -> None:
    events = 0
    for event in _golden_events():
        if not _any_container(event):
            assert DEFAULT_CODEC.canonical(event), event
            events += 1
    assert events > 100


@pytest.mark.parametrize(
    "event",
    [
        AttemptParked(work_id="w", attempt=1, epoch=1, remaining_seconds=30),  # int for float
        AttemptParked(work_id="w", attempt=1, epoch=1, remaining_seconds=float("nan")),
        AttemptParked(work_id="w", attempt=True, epoch=1, remaining_seconds=1.0),
        AttemptParked(work_id="w", attempt=1, epoch=1, remaining_seconds=1.0, consumed=(1,)),  # type: ignore[arg-type]
        AttemptParked(work_id="w", attempt=1, epoch=1, remaining_seconds=1.0, usage={"t": 1}),
        AttemptParked(work_id=Text("w"), attempt=1, epoch=1, remaining_seconds=1.0),
        InputAccepted(work_id="w", key="k", payload={"n": 1}),  # the caller holds the dict
        InputAccepted(work_id="w", key="k", payload=[1]),
        WorkSubmitted(work_id="w", scope="root", binding="b", kind="other"),  # type: ignore[arg-type]
        LeaseRenewed(
            work_id="w",
            attempt=1,
            epoch=1,
            lease_expires_at=datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))),
        ),
        LeaseRenewed(work_id="w", attempt=1, epoch=1, lease_expires_at=datetime(2026, 1, 1)),
    ],
)
def test_near_misses_are_not_canonical(event: Event) -> None:
    assert not DEFAULT_CODEC.canonical(event)


def test_scalars_and_utc_times_are_canonical() -> None:
    at = datetime(2026, 1, 1, 12, 30, 1, 250, tzinfo=UTC)
    assert DEFAULT_CODEC.canonical(
        LeaseRenewed(work_id="w", attempt=1, epoch=2, lease_expires_at=at)
    )
    assert DEFAULT_CODEC.canonical(InputAccepted(work_id="w", key="k", payload=1.5))
    assert DEFAULT_CODEC.canonical(
        AttemptParked(work_id="w", attempt=1, epoch=1, remaining_seconds=0.0, usage={"t": 2.0})
    )
    assert not DEFAULT_CODEC.canonical(None)
