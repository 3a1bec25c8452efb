"""Schedule specs: parse and validate `every` and cron specs, and compute nominal times.

Pure computation (no clock, no I/O): `cronsim` does the cron arithmetic (Debian cron's DST
rules: a time in the spring-forward gap fires right after the jump, a fixed time in the
repeated fall-back hour fires once) and `zoneinfo` with `tzdata` the time zones. An
`every` spec counts whole periods from a recorded anchor (by default the Unix epoch, so
`every 15m` fires at :00, :15, :30, :45 UTC) plus an optional offset, so it never drifts
with how long runs take. Nominal times are instants (UTC); a stored spec is text and is
re-parsed on every read (`parse_stored`): what no longer parses is quarantined.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from cronsim import CronSim, CronSimError

from rota.domain.errors import DomainCode, InvalidCommand

SPEC_FORMAT = 1  # the `spec_format` this rota writes and reads; newer rows are quarantined
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^(?:\d+[smhdw])+$")
_PART = re.compile(r"(\d+)([smhdw])")
_CRON_CHARS = re.compile(r"^[0-9A-Za-z*/,#L?-]+$")


class SpecError(InvalidCommand):
    """A schedule spec, time zone or name that rota does not accept."""

    code = DomainCode.INVALID_SCHEDULE


class Spec(msgspec.Struct, frozen=True):
    """A parsed spec: `every` (seconds, with an offset) or a cron expression, in a zone."""

    every: int | None
    offset: int
    cron: str | None
    timezone: str

    @property
    def text(self) -> str:
        """The stored form: `every 15m`, `every 1h+5m`, or the cron expression."""
        if self.every is not None:
            offset = f"+{format_duration(self.offset)}" if self.offset else ""
            return f"every {format_duration(self.every)}{offset}"
        assert self.cron is not None
        return self.cron

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)


def parse_duration(text: str, what: str = "duration") -> int:
    """`90s`, `15m`, `1h30m`, `2d` -> whole seconds."""
    value = text.strip().lower().replace(" ", "")
    if not _DURATION.fullmatch(value):
        raise SpecError(
            f"{what} {text!r} is not a duration like 90s, 15m, 1h30m or 1d",
            code=DomainCode.INVALID_SCHEDULE,
        )
    return sum(int(n) * _UNITS[u] for n, u in _PART.findall(value))


def format_duration(seconds: int) -> str:
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def zone(name: str) -> ZoneInfo:
    try:
        if not name or name.startswith(("/", ".")) or ".." in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise SpecError(
            f"unknown time zone {name!r}: use an IANA name like Europe/Berlin",
            code=DomainCode.UNKNOWN_TIMEZONE,
        ) from exc


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise SpecError(
            f"schedule name {name!r} must match {NAME.pattern}", code=DomainCode.INVALID_SCHEDULE
        )
    return name


def parse_every(text: str, offset: str | None = None, timezone: str = "UTC") -> Spec:
    """`15m` (or `@every 15m`, `every 15m+5m`) -> a Spec of at least one second."""
    body = text.strip()
    for prefix in ("@every", "every"):
        if body.lower().startswith(prefix):
            body = body[len(prefix) :].strip()
            break
    period_text, _, offset_text = body.partition("+")
    period = parse_duration(period_text, "every")
    if offset is not None and offset_text:
        raise SpecError("give the offset once", code=DomainCode.INVALID_SCHEDULE)
    shift = (
        parse_duration(offset if offset is not None else offset_text, "offset")
        if (offset or offset_text)
        else 0
    )
    if period < 1:
        raise SpecError("every must be at least 1s", code=DomainCode.INVALID_SCHEDULE)
    if shift >= period:
        raise SpecError(
            f"offset {format_duration(shift)} must be shorter than the period",
            code=DomainCode.INVALID_SCHEDULE,
        )
    zone(timezone)
    return Spec(every=period, offset=shift, cron=None, timezone=timezone)


def parse_cron(text: str, timezone: str = "UTC") -> Spec:
    """A 5- or 6-field cron expression (seconds first when 6), or an @alias, validated."""
    expr = " ".join(text.split())
    lowered = expr.lower()
    if lowered.startswith("@"):
        if lowered == "@reboot":
            raise SpecError(
                "@reboot is not supported: rota has no boot", code=DomainCode.INVALID_SCHEDULE
            )
        if lowered.startswith("@every"):
            return parse_every(expr, timezone=timezone)
        if lowered not in ALIASES:
            raise SpecError(
                f"unknown cron alias {expr!r}; known: {', '.join(sorted(ALIASES))}",
                code=DomainCode.INVALID_SCHEDULE,
            )
        expr = ALIASES[lowered]
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise SpecError(
            f"cron {text!r} has {len(fields)} fields; 5 (minute first) or 6 (second first)",
            code=DomainCode.INVALID_SCHEDULE,
        )
    for field in fields:
        if not _CRON_CHARS.fullmatch(field) or "?" in field:
            raise SpecError(
                f"cron field {field!r} of {text!r} is not supported (no ?, W or H)",
                code=DomainCode.INVALID_SCHEDULE,
            )
    tz = zone(timezone)
    try:
        # Building the iterator validates every field; one step proves it yields a time.
        next(CronSim(expr, datetime(2000, 1, 1, tzinfo=tz)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise SpecError(
            f"cron {text!r} is invalid: {exc}", code=DomainCode.INVALID_SCHEDULE
        ) from exc
    return Spec(every=None, offset=0, cron=expr, timezone=timezone)


def parse_stored(text: str, timezone: str) -> Spec:
    """Re-parse a stored spec (`every ...` or a cron expression); raises SpecError."""
    if text.startswith("every "):
        return parse_every(text, timezone=timezone)
    return parse_cron(text, timezone)


def define(
    *,
    every: str | None = None,
    cron: str | None = None,
    offset: str | None = None,
    timezone: str = "UTC",
) -> Spec:
    """The one spec of a definition: exactly one of `every` and `cron`."""
    if (every is None) == (cron is None):
        raise SpecError("give exactly one of every and cron", code=DomainCode.INVALID_SCHEDULE)
    if every is not None:
        return parse_every(every, offset, timezone)
    if offset is not None:
        raise SpecError("offset applies to every, not cron", code=DomainCode.INVALID_SCHEDULE)
    assert cron is not None
    return parse_cron(cron, timezone)


# -- nominal times ----------------------------------------------------------------------


def times_after(spec: Spec, anchor: datetime, after: datetime) -> Iterator[datetime]:
    """The nominal times (UTC, ascending) strictly after `after`, without end."""
    if spec.every is not None:
        period = spec.every
        start = anchor + timedelta(seconds=spec.offset)
        elapsed = (after - start).total_seconds()
        k = int(elapsed // period) + 1 if elapsed >= 0 else 0
        while True:
            at = start + timedelta(seconds=k * period)
            if at > after:
                yield at
            k += 1
    assert spec.cron is not None
    tz = spec.zone
    # Start a little before `after` in local time: cronsim's DST fix-up works on local wall
    # times, so the first results may lie at or before `after`; they are dropped.
    local = (after - timedelta(hours=3)).astimezone(tz).replace(microsecond=0)
    last: datetime | None = None
    for found in CronSim(spec.cron, local):
        at = found.astimezone(UTC)
        if at <= after or (last is not None and at <= last):
            continue
        last = at
        yield at


def times_between(
    spec: Spec, anchor: datetime, after: datetime, until: datetime, limit: int | None = None
) -> list[datetime]:
    """Nominal times in (after, until], at most `limit` (the earliest)."""
    found: list[datetime] = []
    for at in times_after(spec, anchor, after):
        if at > until or (limit is not None and len(found) >= limit):
            break
        found.append(at)
    return found


def count_between(spec: Spec, anchor: datetime, first: datetime, last: datetime) -> int:
    """How many nominal times lie in [first, last] (fast for `every`)."""
    if last < first:
        return 0
    if spec.every is not None:
        start = anchor + timedelta(seconds=spec.offset)
        lo = -(-int((first - start).total_seconds()) // spec.every)
        hi = int((last - start).total_seconds()) // spec.every
        return max(0, hi - lo + 1)
    return len(times_between(spec, anchor, first - timedelta(microseconds=1), last))


def jitter(name: str, nominal: datetime, max_seconds: int) -> timedelta:
    """The deterministic delay of one fire: a hash of the name and the nominal time, so a
    replay, a preview and every runner agree."""
    if max_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{name}\n{rfc3339(nominal)}".encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:8], "big") % (max_seconds + 1))


def rfc3339(at: datetime) -> str:
    """A nominal time as UTC RFC 3339 with a Z (microseconds only when there are some)."""
    at = at.astimezone(UTC)
    text = at.strftime("%Y-%m-%dT%H:%M:%S")
    if at.microsecond:
        text += f".{at.microsecond:06d}"
    return text + "Z"


def fire_identity(name: str, nominal: datetime) -> str:
    return f"schedule/{name}/{rfc3339(nominal)}"


def manual_identity(name: str, key: str) -> str:
    return f"schedule/{name}/manual/{key}"


def work_id(name: str) -> str:
    """The standing Work every fire of a schedule feeds."""
    return f"schedule.{name}"


def dst_flag(spec: Spec, nominal: datetime) -> str | None:
    """`gap` when a cron time fell in a spring-forward gap (fired right after the jump),
    `fold` when it lies in a repeated fall-back hour; None otherwise."""
    if spec.every is not None or spec.timezone == "UTC":
        return None
    local = nominal.astimezone(spec.zone)
    before = (nominal - timedelta(hours=1)).astimezone(spec.zone)
    if local.utcoffset() != before.utcoffset() and local.replace(tzinfo=None) - before.replace(
        tzinfo=None
    ) > timedelta(hours=1):
        return "gap"
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() != local.utcoffset():
        return "fold"
    return None
