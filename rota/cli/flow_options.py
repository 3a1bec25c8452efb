"""`rota submit`'s flow-control options: `--priority`, `--key`, `--cost`, `--throttle`.

The values are read as text and checked here and by the domain, so a bad one is the
domain's `invalid_flow` refusal (exit 1, one line), as from Python or the HTTP API, rather
than argparse's usage error."""

from __future__ import annotations

import argparse
import math

from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events.work import Throttle


def flow_options(parser: argparse.ArgumentParser) -> None:
    """Add the flow-control options of a submit."""
    parser.add_argument(
        "--priority",
        metavar="N",
        help="higher starts first: an integer from -1000 to 1000 (default 0)",
    )
    parser.add_argument(
        "--key",
        action="append",
        metavar="KEY",
        help="a concurrency key the Work counts under, like tenant:acme (repeatable, at most "
        "8; the first is its fair-share flow)",
    )
    parser.add_argument(
        "--cost",
        metavar="N",
        help="the tokens a start takes from each rate bucket it meets: 1 to 1000000 (default 1)",
    )
    parser.add_argument(
        "--throttle",
        metavar="KEY:SECONDS",
        help="at most one start of the Works throttled on KEY every SECONDS (a start due "
        "sooner waits), like tenant:acme:60",
    )


def flow_number(text: str | None, option: str, default: int) -> int:
    """`--priority` or `--cost` as an integer (`invalid_flow` when it is not one); the
    domain checks its range."""
    if text is None:
        return default
    try:
        return int(text.strip()) if len(text) <= 20 else int("x")
    except ValueError:
        raise InvalidCommand(
            f"{option} {text[:40]!a} must be an integer", code=DomainCode.INVALID_FLOW
        ) from None


def throttle_option(text: str | None) -> Throttle | None:
    """`--throttle KEY:SECONDS` (split at the last colon: keys hold colons) as a Throttle;
    the domain checks the key and the period's range."""
    if text is None:
        return None
    key, colon, seconds = text.rpartition(":")
    try:
        period = float(seconds) if colon and key and len(seconds) <= 40 else math.nan
    except ValueError:
        period = math.nan
    if not math.isfinite(period):
        raise InvalidCommand(
            f"--throttle {text[:80]!a} must be KEY:SECONDS, like tenant:acme:60",
            code=DomainCode.INVALID_FLOW,
        )
    return Throttle(key, period)
