"""`rota submit --debounce KEY:WAIT[:MAX]` and `--unique KEY[:forever]`
(docs/flow-control-coalescing.md): parsed into `rota.Debounce` / `rota.Unique`."""

from __future__ import annotations

import argparse
from typing import Any

from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events.work import Debounce, Unique

LIFETIMES = ("until_terminal", "forever")


def add_coalescing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debounce",
        metavar="KEY:WAIT[:MAX]",
        help="merge the submits on KEY into one run, started WAIT seconds after the last "
        "(at most MAX, default 10 x WAIT, after the first); a key ending in :NUMBER needs MAX",
    )
    parser.add_argument(
        "--unique",
        metavar="KEY[:forever]",
        help="create nothing while the Work holding KEY is live (:forever: ever existed)",
    )


def coalescing(args: argparse.Namespace) -> dict[str, Any]:
    """The `debounce` / `unique` fields of a `Submission` the options ask for."""
    found: dict[str, Any] = {}
    if args.debounce is not None:
        found["debounce"] = parse_debounce(args.debounce)
    if args.unique is not None:
        key, _, until = args.unique.rpartition(":")
        found["unique"] = Unique(key, until) if until in LIFETIMES else Unique(args.unique)
    return found


def parse_debounce(value: str) -> Debounce:
    """`KEY:WAIT[:MAX]`: the last two numbers are WAIT and MAX when both are numbers."""
    parts = value.rsplit(":", 2)
    if len(parts) == 3 and _number(parts[1]) is not None and _number(parts[2]) is not None:
        return Debounce(parts[0], _number(parts[1]) or 0.0, _number(parts[2]))
    key, _, wait = value.rpartition(":")
    seconds = _number(wait)
    if not key or seconds is None:
        raise InvalidCommand(
            f"--debounce {value!r} must be KEY:WAIT[:MAX] (seconds), like repo:acme:30:300",
            code=DomainCode.INVALID_FLOW,
        )
    return Debounce(key, seconds)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


__all__ = ["add_coalescing_options", "coalescing", "parse_debounce"]
