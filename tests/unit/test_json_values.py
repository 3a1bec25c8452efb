"""Input, results and metadata are JSON values, kept exactly or refused with the bad path.

Issue 15 item 6: NaN, Infinity and 1e999 were stored as null (and then shared a derived
input key with a real null), a set became a list, a datetime a naive string, bytes a base64
string, and a callable returning a set completed.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events import InputAccepted
from rota.domain.results import Result, _check, _is_json, check_payload, validate_result
from rota.domain.submission import derived_input_key
from rota.infrastructure.codec import Codec
from rota.infrastructure.executors.inproc import to_result


class Colour(enum.StrEnum):
    RED = "red"


REFUSED: list[tuple[Any, str, str]] = [
    (float("nan"), "input payload", "nan is not a JSON number"),
    (float("inf"), "input payload", "inf is not a JSON number"),
    ([1, {"x": -float("inf")}], "input payload[1].x", "-inf is not a JSON number"),
    ({"tags": {1, 2}}, "input payload.tags", "a set is not a JSON value"),
    ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "input payload.when", "a datetime is not"),
    ([0, 1, 2, {"blob": b"\x00"}], "input payload[3].blob", "bytes is not a JSON value"),
    ((1, 2), "input payload", "a tuple is not a JSON value"),
    ({"a b": [frozenset()]}, 'input payload["a b"][0]', "a frozenset is not a JSON value"),
    ({1: "one"}, "input payload", "the key 1 is not a string"),
    ({"c": Colour.RED}, "input payload.c", "a Colour is not a JSON value"),
    ({"n": [-(2**14280)]}, "input payload.n[0]", "an integer of 14281 bits is too long"),
]


@pytest.mark.parametrize(("value", "where", "why"), REFUSED)
def test_a_value_json_cannot_hold_exactly_is_refused_with_its_path(
    value: Any, where: str, why: str
) -> None:
    with pytest.raises(InvalidCommand) as refused:
        check_payload(value, "input payload")
    assert refused.value.code == DomainCode.NOT_JSON
    assert refused.value.message.startswith(f"{where}: {why}"), refused.value.message


def test_1e999_as_the_cli_parses_it_is_refused() -> None:
    import json

    with pytest.raises(InvalidCommand) as refused:
        check_payload(json.loads('{"big": 1e999}'), "input payload")
    assert refused.value.code == DomainCode.NOT_JSON and "input payload.big: inf" in str(
        refused.value
    )


def _json_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    _json_containers,
    max_leaves=20,
)


@given(JSON)
def test_every_json_value_is_kept_exactly(value: Any) -> None:
    check_payload(value, "input payload")
    assert msgspec.json.decode(msgspec.json.encode(value)) == value


def test_the_longest_integer_is_kept_exactly() -> None:
    longest = -(2**14280 - 1)  # 4299 digits and a sign: as many characters as Python reads
    check_payload([longest], "input payload")
    event = InputAccepted(work_id="w", key="k", payload=[longest])
    codec = Codec()
    tag, version, stored = codec.encode(event)
    assert codec.decode(tag, version, stored) == event


def test_a_result_with_a_set_is_refused() -> None:
    with pytest.raises(InvalidCommand) as refused:
        validate_result(Result(data={"seen": {"a"}}))
    assert refused.value.code == DomainCode.NOT_JSON and "result data.seen" in str(refused.value)


@pytest.mark.parametrize(
    "returned",
    [{"a", "b"}, {"when": datetime(2026, 1, 1, tzinfo=UTC)}, b"raw", [float("nan")], (1, 2)],
)
def test_an_in_process_return_value_json_cannot_hold_is_invalid_result(returned: Any) -> None:
    result = to_result(returned)
    assert result.outcome == "failed" and result.error_code == "invalid_result"
    assert result.data is None and "is not a JSON" in (result.error_message or "")


def test_an_in_process_json_return_value_completes_unchanged() -> None:
    value = {"n": 1, "xs": [1.5, None, True], "s": "é"}
    assert to_result(value) == Result(outcome="completed", data=value)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.frozensets(st.integers(), max_size=3)
        | st.dictionaries(st.text() | st.integers() | st.booleans(), inner, max_size=4)
    )


ANYTHING = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**14300), max_value=2**14300)
    | st.floats()
    | st.text()
    | st.binary(max_size=4)
    | st.datetimes()
    | st.sampled_from([Colour.RED, 1j, object(), float("-inf")]),
    _containers,
    max_leaves=20,
)


@given(ANYTHING)
def test_any_python_value_is_kept_exactly_or_refused_with_a_code(value: Any) -> None:
    """The fuzz of issue 15's Must show, for payloads: no other exception, ever."""
    try:
        check_payload(value, "input payload")
    except InvalidCommand as refusal:
        assert refusal.code in {
            DomainCode.NOT_JSON,
            DomainCode.PAYLOAD_TOO_DEEP,
            DomainCode.PAYLOAD_TOO_LARGE,
        }
        assert refusal.message.startswith("input payload")
        return
    event = InputAccepted(work_id="w", key="k", payload=value)
    codec = Codec()
    assert codec.decode(*codec.encode(event)) == event


near_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=4)
    | st.sampled_from([2**14280, -(2**14279), b"x", (1,), {1}, Colour.RED]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 2), inner, max_size=3)
    ),
    max_leaves=8,
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@given(value=near_json | st.integers(30, 35).map(_nested))
def test_the_quick_walk_accepts_exactly_what_the_checked_walk_accepts(value: Any) -> None:
    try:
        _check(value, "input payload", "", 0)
    except InvalidCommand:
        assert not _is_json(value, 0)
    else:
        assert _is_json(value, 0)


@given(payload=st.dictionaries(st.text(max_size=5), st.integers() | st.text(), max_size=5))
def test_the_derived_key_from_the_checked_encoding_is_the_derived_key(payload: Any) -> None:
    encoded = check_payload(payload, "input payload", sorted_keys=True)
    assert encoded == msgspec.json.encode(payload, order="sorted")
    assert derived_input_key(payload, encoded) == derived_input_key(payload)
    assert check_payload(None, "input payload") is None
