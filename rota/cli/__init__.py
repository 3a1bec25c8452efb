"""The `rota` command line: `rota [--config FILE] [--store URL] <command> ...`.

The configuration is `--config FILE`, else `./rota.toml` (a missing default file means the
defaults; a missing named file is an error). The store is `--store URL`, else `$ROTA_STORE`,
else the config's `[store] url`. Bindings come from the config's `[[bindings]]`; the CLI
runs shell bindings (and any executor rota registers itself). Python callables cannot be
given here: Work bound to one stays `ready` (waiting `unknown_binding`) until a process
that registers it runs. `run` and `submit` refuse a config whose bindings name an executor
the CLI does not have (`unknown_executor`).

Each command prints its result on stdout (JSON with `--json`) and exits 0 on success. On
failure it prints one line on stderr, `rota: <code>: <what was wrong>`, and exits 2 for a
usage error or an invalid config, 1 otherwise (130 when interrupted).

`rota run` (the daemon) prints `rota: running (...)` on stderr once its SIGTERM/SIGINT
handlers are in place and `rota: stopped` when it has stopped, keeping stdout for its final
summary; the first signal stops it gracefully (leases released), a second one forces it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from rota.cli import log, ops, replay, work
from rota.cli.common import USAGE_CODES, Parser, UsageError
from rota.domain.errors import RotaError
from rota.infrastructure.config import DEFAULT_CONFIG

Command = Callable[[argparse.Namespace], int]
# Each module adds its commands to the parser; a new command group is a new module here.
COMMAND_MODULES = (work, log, replay, ops)

__all__ = ["UsageError", "build_parser", "run"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rota", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--config", metavar="FILE", help=f"the config file (default: ./{DEFAULT_CONFIG})"
    )
    parser.add_argument(
        "--store", metavar="URL", help="store URL (default: $ROTA_STORE, else the config's)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def run(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    handler: Command = args.handler
    try:
        return handler(args)
    except RotaError as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"rota: {exc.code}: {message}", file=sys.stderr)
        return 2 if exc.code in USAGE_CODES else 1
    except KeyboardInterrupt:
        print("rota: interrupted", file=sys.stderr)
        return 130
