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
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rota.foreground import Status, json_record
from rota.infrastructure.logging import (
    FORMATS,
    LEVELS,
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
