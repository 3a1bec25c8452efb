"""What an executor reports when an attempt finishes or suspends, and its validation.

A `Result` is untrusted input from an executor: units, amounts, codes, sizes and turn
declarations are validated before anything is written. Only an operation error's code and
message are ever stored; other error text stays out of the log.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Literal

import msgspec

from rota.domain.artifacts import Artifact, check_artifacts
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.waits import check_wait
from rota.domain.waits_types import WaitPredicate

UNIT_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
RESERVED_UNITS = frozenset({"turns", "attempts"})
CODE_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
TURN_STATUS = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
TURN_KEY = "core.turn.v1"
MAX_MESSAGE = 1000
MAX_DATA_BYTES = 256 * 1024
MAX_DEPTH = 32

ResultKind = Literal["completed", "failed", "waiting", "handoff"]


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """A finished or suspended attempt, as the executor saw it."""

    outcome: ResultKind = "completed"
    data: Any = None
    usage: dict[str, float] = msgspec.field(default_factory=dict)
    error_code: str | None = None
    error_message: str | None = None
    permanent: bool = False
    retry_at: datetime | None = None
    retry_unknown: bool = False
    consumed: list[int] = msgspec.field(default_factory=list)
    # A failure that is no proof nothing of the attempt still runs (an unacknowledged or
    # ambiguous launch): its capacity slot stays held until a stop is verified.
    holds_resources: bool = False
    # A waiting result's wait predicate: only input it matches resumes the attempt
    # (rota.domain.waits); None: any input does.
    wait: WaitPredicate | None = None
    # References to what the attempt produced (rota.domain.artifacts), kept in its history.
    artifacts: list[Artifact] = msgspec.field(default_factory=list)


class Turn(msgspec.Struct, frozen=True):
    status: str
    comment: str = ""


def validate_result(result: Result) -> Result:
    """Refuse what must never reach the log; return the result unchanged when it is sound."""
    for unit, amount in result.usage.items():
        if not isinstance(unit, str) or not UNIT_PATTERN.fullmatch(unit):
            raise InvalidCommand(
                f"usage unit {unit!r} must match {UNIT_PATTERN.pattern}",
                code=DomainCode.INVALID_USAGE,
            )
        if unit in RESERVED_UNITS:
            raise InvalidCommand(
                f"usage unit {unit!r} is reserved: rota counts turns and attempts itself",
                code=DomainCode.INVALID_USAGE,
            )
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise InvalidCommand(f"usage {unit!r} must be a number", code=DomainCode.INVALID_USAGE)
        if not math.isfinite(amount) or amount < 0:
            raise InvalidCommand(
                f"usage {unit!r} must be finite and non-negative, not {amount!r}",
                code=DomainCode.INVALID_USAGE,
            )
    if result.error_code is not None and not CODE_PATTERN.fullmatch(result.error_code):
        raise InvalidCommand(
            f"error code {result.error_code!r} must match {CODE_PATTERN.pattern}",
            code=DomainCode.INVALID_RESULT,
        )
    if result.error_message is not None and len(result.error_message) > MAX_MESSAGE:
        raise InvalidCommand(
            f"error message is {len(result.error_message)} characters; at most {MAX_MESSAGE}",
            code=DomainCode.INVALID_RESULT,
        )
    if result.outcome != "failed" and (result.permanent or result.retry_at or result.retry_unknown):
        raise InvalidCommand(
            "permanent and retry hints only apply to a failed result",
            code=DomainCode.INVALID_RESULT,
        )
    if result.wait is not None:
        if result.outcome != "waiting":
            raise InvalidCommand(
                "a wait predicate only applies to a waiting result",
                code=DomainCode.INVALID_WAIT,
            )
        check_wait(result.wait)
    check_payload(result.data, "result data")
    turn_of(result.data)
    if result.artifacts:
        check_artifacts(result.artifacts)
    return result


def check_payload(value: Any, what: str, *, sorted_keys: bool = False) -> bytes | None:
    """Refuse a payload that is not exactly a JSON value, above 256 KiB or nested deeper
    than 32 levels; return its JSON encoding (object keys sorted with `sorted_keys`), or
    None for the commonest data (null, true, false), which is not encoded.

    A payload is kept as given or refused, never changed: only `None`, `bool`, `int`, a
    finite `float`, `str`, `list` and `dict` with `str` keys (those exact types) are JSON
    values. NaN, infinities, sets, tuples, bytes, datetimes and every other type would be
    stored as something else (null, a list, a string), so the refusal names the path of the
    first bad value: `input payload[3].when: a datetime is not a JSON value`.
    """
    if value is None or value is True or value is False:
        return None  # the commonest data (none): a JSON value of at most 5 bytes
    if not _is_json(value, 0):
        _check(value, what, "", 0)  # the refusal, with the path of the first bad value
    try:
        encoded = msgspec.json.encode(value, order="sorted" if sorted_keys else None)
    except UnicodeEncodeError:
        check_unicode(value, what)
        raise  # (check_unicode refuses what UTF-8 cannot encode)
    if len(encoded) > MAX_DATA_BYTES:  # (sorting keys leaves the length as it is)
        raise InvalidCommand(
            f"{what} is {len(encoded)} bytes encoded; at most {MAX_DATA_BYTES}",
            code=DomainCode.PAYLOAD_TOO_LARGE,
        )
    return encoded


SCALARS = (type(None), bool, int, str)
# Python converts integers of at most 4300 characters (sys.int_info; msgspec's decoder
# counts the sign too), so neither the encoder nor a replay could read a longer one; below
# 2**14280 an integer has at most 4299 digits.
MAX_INT_BITS = 14_280
KEY_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _is_json(value: Any, level: int) -> bool:
    """Whether `_check` would accept `value`, without the paths it builds for its message."""
    if level > MAX_DEPTH:
        return False
    kind = type(value)
    if kind is int:
        return bool(value.bit_length() <= MAX_INT_BITS)
    if kind in SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(key) is str and _is_json(item, level + 1) for key, item in value.items())
    if kind is list:
        return all(_is_json(item, level + 1) for item in value)
    return False


def _check(value: Any, what: str, path: str, level: int) -> None:
    if level > MAX_DEPTH:
        raise InvalidCommand(
            f"{what} is nested deeper than {MAX_DEPTH}", code=DomainCode.PAYLOAD_TOO_DEEP
        )
    kind = type(value)
    if kind is int and value.bit_length() > MAX_INT_BITS:
        _not_json(
            what,
            path,
            f"an integer of {value.bit_length()} bits is too long: rota stores integers of "
            f"at most {MAX_INT_BITS} bits (4299 digits); store it as a string",
        )
    if kind in SCALARS:
        return
    if kind is float:
        if not math.isfinite(value):
            _not_json(
                what,
                path,
                f"{value!r} is not a JSON number (JSON has no NaN or Infinity, and a number "
                "beyond ±1.8e308 reads as Infinity)",
            )
        return
    if kind is list:
        for index, item in enumerate(value):
            _check(item, what, f"{path}[{index}]", level + 1)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                _not_json(what, path, f"the key {key!r} is not a string (JSON keys are strings)")
            step = (
                f".{key}" if KEY_PATH.fullmatch(key) else f"[{msgspec.json.encode(key).decode()}]"
            )
            _check(item, what, path + step, level + 1)
        return
    _not_json(
        what,
        path,
        f"{_named(kind.__name__)} is not a JSON value (use null, true/false, a finite number, a "
        "string, a list or an object with string keys)",
    )


def check_unicode(value: Any, what: str) -> None:
    """Refuse (`not_json`) a lone surrogate (`"\\ud800"`, which JSON can escape but UTF-8
    cannot encode) in any string or object key of the JSON value `value`, naming its path;
    iterative, so any depth of a parsed document is walked. The one check for a payload,
    an HTTP body and a CLI argument."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            _refuse_surrogate(item, what, path)
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    _refuse_surrogate(key, what, path)
                    step = f".{key}" if KEY_PATH.fullmatch(key) else f"[{key!a}]"
                    stack.append((child, path + step))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in `text` (what UTF-8 cannot encode: a JSON `"\\ud800"`, or
    an argument's undecodable byte as Python hands it over), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start : exc.start + 1]
    return None


def _refuse_surrogate(text: str, what: str, path: str) -> None:
    bad = lone_surrogate(text)
    if bad is not None:
        _not_json(what, path, f"holds a lone surrogate ({bad!a}): not valid Unicode")


def _named(type_name: str) -> str:
    if type_name in ("bytes", "bytearray"):
        return type_name
    return ("an " if type_name[0].lower() in "aeiou" else "a ") + type_name


def _not_json(what: str, path: str, why: str) -> None:
    if len(path) > 200:  # the message must stay short enough to be stored as an error
        path = "..." + path[-200:]
    raise InvalidCommand(f"{what}{path}: {why}", code=DomainCode.NOT_JSON)


def turn_of(data: Any) -> Turn | None:
    """The turn an outcome's data declares under `core.turn.v1`, validated; None without one."""
    if not isinstance(data, dict) or TURN_KEY not in data:
        return None
    raw = data[TURN_KEY]
    if not isinstance(raw, dict) or not isinstance(raw.get("status"), str):
        raise InvalidCommand(
            f"{TURN_KEY} must be an object with a string status", code=DomainCode.INVALID_TURN
        )
    status = raw["status"]
    if not TURN_STATUS.fullmatch(status):
        raise InvalidCommand(
            f"turn status {status!r} must match {TURN_STATUS.pattern}", code=DomainCode.INVALID_TURN
        )
    comment = raw.get("comment", "")
    if not isinstance(comment, str) or len(comment) > MAX_MESSAGE:
        raise InvalidCommand(
            f"turn comment must be a string of at most {MAX_MESSAGE} characters",
            code=DomainCode.INVALID_TURN,
        )
    return Turn(status, comment)
