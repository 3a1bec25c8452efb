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
from collections.abc import Iterator

from rota.foreground import Status
from rota.infrastructure.logging import (
    FORMATS,
    LEVELS,
    LogSettings,
    configured,
    log_settings,
)


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
def run_logging(args: argparse.Namespace) -> Iterator[Status]:
    """Log to stderr as the run's settings say, for the run; yields its status lines."""
    settings = settings_of(args)
    with configured(settings) as handler:
        yield Status(settings, handler)


__all__ = ["Status", "log_options", "run_logging", "settings_of"]
