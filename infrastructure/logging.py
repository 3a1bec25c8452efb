"""Structured logs: the text and JSON formatters, the log settings (flag over environment
over default) and installing them on the root logger (the CLI does, for one command).

Both formats write one line per record. JSON: one object with `time` (UTC, milliseconds),
`level`, `logger`, `message` and the record's fields (the decision lines' `kind`, `event`,
`work`, `execution`, `epoch`, `position`, `delivery_id`, ...). Text: `time LEVEL message
key=value ...`, a value quoted as JSON when it holds a space, a quote or `=`.

An exception attached to a record is shown as its type only (`error_type`; `error_code`
when it carries rota's `code`): its message and traceback may hold what a job or a
provider said, environment values included, and a log line never does. Nothing here
changes logging at import time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from rota.domain.errors import RotaError
from rota.infrastructure.config import EntryCode
from rota.infrastructure.decision_lines import FIELDS_ATTRIBUTE

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
FORMAT_VARIABLE, LEVEL_VARIABLE = "ROTA_LOG_FORMAT", "ROTA_LOG_LEVEL"
DEFAULT_FORMAT: LogFormat = "text"
DEFAULT_LEVEL = "info"
_MARK = "_rota_handler"  # set on the handler `configure` installs, so it is replaced once


@dataclass(frozen=True)
class LogSettings:
    """The log format and level in force, with where each came from."""

    format: LogFormat = DEFAULT_FORMAT
    level: str = DEFAULT_LEVEL
    format_source: str = "default"
    level_source: str = "default"

    def rows(self) -> list[tuple[str, str, str]]:
        """`(key, value, source)` for `rota config show`."""
        return [
            ("log.format", self.format, self.format_source),
            ("log.level", self.level, self.level_source),
        ]


def _choose(
    flag: str | None,
    variable: str,
    environ: Mapping[str, str],
    default: str,
    choices: tuple[str, ...],
) -> tuple[str, str]:
    if flag is not None:
        value, source = flag, "flag"
    elif environ.get(variable):
        value, source = environ[variable], "environment"
    else:
        return default, "default"
    chosen = value.strip().lower()
    if chosen not in choices:
        where = f"${variable}" if source == "environment" else "the flag"
        message = f"{where} must be one of {', '.join(choices)}, not {value[:40]!a}"
        raise RotaError(message, code=EntryCode.USAGE)
    return chosen, source


def log_settings(
    format_flag: str | None = None,
    level_flag: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> LogSettings:
    """The settings from the flags, else `$ROTA_LOG_FORMAT` / `$ROTA_LOG_LEVEL`, else the
    defaults (text, info); a value that is not a choice is refused (`usage`)."""
    environ = os.environ if environ is None else environ
    fmt, fmt_source = _choose(format_flag, FORMAT_VARIABLE, environ, DEFAULT_FORMAT, FORMATS)
    level, level_source = _choose(level_flag, LEVEL_VARIABLE, environ, DEFAULT_LEVEL, LEVELS)
    return LogSettings(fmt, level, fmt_source, level_source)  # type: ignore[arg-type]


# -- formatting ----------------------------------------------------------------------------


def _time(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _value(value: Any) -> Any:
    """A field's value as JSON can hold it (times as RFC 3339 text, others as text)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    return str(value)


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record's fields: the ones its caller attached, and its exception's type and code."""
    attached = getattr(record, FIELDS_ATTRIBUTE, None)
    fields = {k: _value(v) for k, v in attached.items()} if isinstance(attached, dict) else {}
    if record.exc_info and record.exc_info[0] is not None:
        exc_type, exc = record.exc_info[0], record.exc_info[1]
        fields["error_type"] = exc_type.__name__
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            fields["error_code"] = str(code)
    return fields


def _message(record: logging.LogRecord) -> str:
    try:
        return " ".join(record.getMessage().split())  # one line, whatever it holds
    except (TypeError, ValueError):
        return str(record.msg)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
            **record_fields(record),
        }
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


_QUOTED = re.compile(r'[ "=\\]')  # a text value holding one of these is quoted (JSON)


def _text_value(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value)
    if not text or _QUOTED.search(text) is not None or not text.isprintable():
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """`time LEVEL message key=value ...`, one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        parts = [_time(record), f"{record.levelname:<7}", _message(record)]
        parts += [f"{k}={_text_value(v)}" for k, v in fields.items()]
        return " ".join(parts)


def formatter(fmt: LogFormat) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


@contextlib.contextmanager
def configured(settings: LogSettings, stream: TextIO | None = None) -> Iterator[logging.Handler]:
    """While open, write rota's records (at `settings.level` and above) and other
    libraries' warnings to `stream` (default: stderr) in `settings.format`; on exit the
    handler is removed and rota's logger gets its level back. A handler an enclosing call
    installed is replaced meanwhile, so no record is written twice."""
    root, rota_logger = logging.getLogger(), logging.getLogger("rota")
    replaced = [h for h in root.handlers if getattr(h, _MARK, False)]
    for old in replaced:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _MARK, True)
    handler.setFormatter(formatter(settings.format))
    previous = rota_logger.level
    rota_logger.setLevel(settings.level.upper())
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        rota_logger.setLevel(previous)
        for old in replaced:
            root.addHandler(old)
        with contextlib.suppress(OSError, ValueError):
            handler.flush()


__all__ = [
    "FORMATS",
    "LEVELS",
    "JsonFormatter",
    "LogSettings",
    "TextFormatter",
    "configured",
    "log_settings",
]
