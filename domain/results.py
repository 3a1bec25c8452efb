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

from rota.domain.errors import DomainCode, InvalidCommand

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


class Turn(msgspec.Struct, frozen=True):
    status: str
    comment: str = ""


def validate_result(result: Result) -> Result:
    """Refuse what must never reach the log; return the result unchanged when it is sound."""
    for unit, amount in result.usage.items():
        if not isinstance(unit, str) or not UNIT_PATTERN.match(unit):
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
    if result.error_code is not None and not CODE_PATTERN.match(result.error_code):
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
    check_payload(result.data, "result data")
    turn_of(result.data)
    return result


def check_payload(value: Any, what: str) -> None:
    """Refuse payloads above 256 KiB or nested deeper than 32 levels."""
    _depth(value, what, 0)
    size = len(msgspec.json.encode(value))
    if size > MAX_DATA_BYTES:
        raise InvalidCommand(
            f"{what} is {size} bytes encoded; at most {MAX_DATA_BYTES}",
            code=DomainCode.PAYLOAD_TOO_LARGE,
        )


def _depth(value: Any, what: str, level: int) -> None:
    if level > MAX_DEPTH:
        raise InvalidCommand(
            f"{what} is nested deeper than {MAX_DEPTH}", code=DomainCode.PAYLOAD_TOO_DEEP
        )
    if isinstance(value, dict):
        for item in value.values():
            _depth(item, what, level + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _depth(item, what, level + 1)


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
    if not TURN_STATUS.match(status):
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
