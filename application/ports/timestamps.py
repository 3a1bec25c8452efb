"""Timestamps as the log stores them: ISO-8601 UTC with microseconds and a `Z`.

Part of the log's contract: every `recorded_at` (`RecordedEvent`, `RawRecord`) is written by
`format_timestamp` and read back by `parse_timestamp`.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_timestamp(when: datetime) -> str:
    """ISO-8601 UTC with microseconds and a `Z`: the log's `recorded_at` form."""
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_timestamp(text: str) -> datetime:
    """Inverse of `format_timestamp`; also accepts any ISO-8601 with an offset."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no timezone; rota stores UTC")
    return when.astimezone(UTC)
