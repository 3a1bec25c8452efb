"""`rota run`'s logs: the `--log-format` and `--log-level` options, the logging set up for
the run, and the daemon's own status lines in the chosen format.

The format is `--log-format`, else `$ROTA_LOG_FORMAT`, else `text`; the level
`--log-level`, else `$ROTA_LOG_LEVEL`, else `info` (docs/operator.md, "Logs"). Records go
to stderr, one line each; stdout keeps the run's final summary. In text the daemon's status
lines stay `rota: running (...)` and `rota: stopped`; in JSON they are records too
(`kind` `daemon`), so every line on stderr is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rota.infrastructure.decision_lines import FIELDS_ATTRIBUTE
from rota.infrastructure.logging import (
    FORMATS,
    LEVELS,
    JsonFormatter,
    LogSettings,
    configured,
    log_settings,
)

if TYPE_CHECKING:
    from rota.replay.progress import ProgressFactory


def log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        help="one line per record on stderr, as text or JSON (default: $ROTA_LOG_FORMAT, "
        "else text)",
    )
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        help="the least severe records shown (default: $ROTA_LOG_LEVEL, else info)",
    )


def settings_of(args: argparse.Namespace) -> LogSettings:
    """The run's log settings; a bad `$ROTA_LOG_FORMAT` or `$ROTA_LOG_LEVEL` is `usage`."""
    return log_settings(getattr(args, "log_format", None), getattr(args, "log_level", None))


class Status:
    """The daemon's status lines (running, stopped, a forced stop) in the run's format.

    A line is written whole, in one write under the run's log handler's lock: a record
    that another thread logs meanwhile (a launch refused as the daemon stops) comes before
    or after it, never between the line and its newline."""

    def __init__(self, settings: LogSettings, handler: logging.Handler | None = None) -> None:
        self.settings = settings
        self.handler = handler

    def say(self, text: str, message: str, **fields: Any) -> None:
        """`rota: <text>` on stderr in the text format; a record `message` in JSON."""
        line = f"rota: {text}"
        if self.settings.format == "json":
            # Shown whatever the level, as the text lines are: an operator waits for them.
            line = json_record("rota.daemon", "INFO", message, kind="daemon", **fields)
        handler = self.handler
        if handler is not None:
            handler.acquire()
        try:
            with contextlib.suppress(OSError):
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        finally:
            if handler is not None:
                handler.release()


@contextlib.contextmanager
def progress_logging(args: argparse.Namespace) -> Iterator[ProgressFactory]:
    """For a long command (verify, rebuild, export, import, doctor, recover-corrupt): its
    progress factory, with the command's log records on stderr in its log format meanwhile.

    Off a terminal (or with `--json`) progress is a `rota.progress` record every few
    seconds (`rota.replay.progress`); the other loggers show warnings and errors unless
    `--log-level` (or `$ROTA_LOG_LEVEL`) asks for more, so a short command still writes
    nothing but its result."""
    from rota.replay.progress import LOGGER, factory

    settings = settings_of(args)
    if settings.level_source == "default":
        settings = dataclasses.replace(settings, level="warning")
    previous = LOGGER.level
    with configured(settings):
        LOGGER.setLevel(logging.INFO)
        try:
            yield factory(json=bool(getattr(args, "json", False)))
        finally:
            LOGGER.setLevel(previous)


def json_record(logger: str, level: str, message: str, **fields: Any) -> str:
    """One JSON log line (as `JsonFormatter` writes them) for a line the command writes
    itself: its status lines, and its refusal under `--log-format json`."""
    record = logging.makeLogRecord(
        {"name": logger, "levelname": level, "levelno": logging.getLevelName(level),
         "msg": message, FIELDS_ATTRIBUTE: fields}
    )  # fmt: skip
    return JsonFormatter().format(record)


@contextlib.contextmanager
def run_logging(args: argparse.Namespace) -> Iterator[Status]:
    """Log to stderr as the run's settings say, for the run; yields its status lines."""
    settings = settings_of(args)
    with configured(settings) as handler:
        yield Status(settings, handler)


__all__ = [
    "Status",
    "json_record",
    "log_options",
    "progress_logging",
    "run_logging",
    "settings_of",
]
