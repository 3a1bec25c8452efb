"""The `rota` command line: `rota [--config FILE] [--store URL] <command> ...`.

The configuration is `--config FILE`, else `$ROTA_CONFIG`, else `./rota.toml` (a missing
default file means the defaults; a missing named file is an error); `rota config validate`
checks it and `rota config show` prints every value with where it came from. The store is
`--store URL`, else `$ROTA_STORE`, else the config's `[store] url`. Bindings come from the
config's `[[bindings]]`; the CLI runs shell bindings (and any executor rota registers
itself), and your Python callables when `run` is given the function that registers them
(`--app MODULE:FUNCTION` or `[app] module`, rota.cli.app). `run` and `submit` refuse a
config whose bindings name an executor neither the CLI nor the app has (`unknown_executor`),
and `submit` a binding known nowhere (`unknown_binding`: not defined here, never served by
a daemon on the store).

Each command prints its result on stdout (JSON with `--json`) and exits 0 on success. On
failure it prints one line on stderr, `rota: <code>: <what was wrong>` (with `--json`, one
JSON object instead: `{"error": {"code": ..., "message": ...}}`), and exits 2 for a usage
error or an invalid config, 1 otherwise (130 when interrupted). A reader that closes stdout
early (`rota events | head -1`) ends the command silently (no line on stderr), exit 1.

`rota run --http ADDR` also serves the HTTP API from the daemon, `rota serve` serves it
read-only over a store, and `rota token add NAME --scope ...` makes its bearer tokens
(docs/http.md).

`rota run` (the daemon) prints `rota: running (...)` on stderr once its SIGTERM/SIGINT
handlers are in place and `rota: stopped` when it has stopped, keeping stdout for its final
summary; the first signal stops it gracefully (leases released), a second one forces it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Callable, Sequence

from rota.cli import config, flow, log, ops, replay, retention, run_command, schedule, serve, work
from rota.cli.common import USAGE_CODES, Parser, UsageError
from rota.domain.errors import DomainCode, RotaError
from rota.domain.results import lone_surrogate
from rota.domain.submission import WORK_ID
from rota.infrastructure.config import DEFAULT_CONFIG

Command = Callable[[argparse.Namespace], int]
# Each module adds its commands to the parser; a new command group is a new module here.
COMMAND_MODULES = (work, run_command, log, replay, ops, config, serve, schedule, flow, retention)

__all__ = ["UsageError", "build_parser", "run"]

# Positional arguments, named as `rota <command> --help` shows them (upper case).
POSITIONALS = frozenset({"work", "name", "export", "start", "end"})


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rota", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--version", action="version", version=f"rota {version()}", help="print rota's version"
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"the config file (default: $ROTA_CONFIG, else ./{DEFAULT_CONFIG})",
    )
    parser.add_argument(
        "--store", metavar="URL", help="store URL (default: $ROTA_STORE, else the config's)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def version() -> str:
    """The installed package's version (what `pip show rota` says)."""
    try:
        return importlib.metadata.version("rota")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        from rota import __version__

        return __version__


def run(argv: Sequence[str]) -> int:
    argv = list(argv)
    json_errors = "--json" in argv
    log_json = False
    try:
        args = build_parser().parse_args(argv)
        log_json = _logs_json(args)
        _check_utf8(args)
        handler: Command = args.handler
        status = handler(args)
        sys.stdout.flush()  # a closed stdout fails here, not in the interpreter's exit
        return status
    except RotaError as exc:
        report(exc.code, str(exc), json_errors=json_errors, log_json=log_json)
        return 2 if exc.code in USAGE_CODES else 1
    except BrokenPipeError:
        # The reader went away (`rota events | head -1`): nothing is wrong, so nothing is
        # said (as `cat` or `git log` do). Point stdout at /dev/null so the interpreter's
        # final flush of what is still buffered cannot fail again.
        output_closed()
        return 1
    except KeyboardInterrupt:
        print("rota: interrupted", file=sys.stderr)
        return 130


def _check_utf8(args: argparse.Namespace) -> None:
    """Refuse an argument whose bytes are not UTF-8 (Python hands them over as lone
    surrogates, `'\\udcff'`) before the store's encoder fails on it: a Work id is what any
    bad Work id is (`invalid_work_id` to submit, `unknown_work` to the rest: no store can
    hold one), anything else a `usage` error naming the option."""
    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str) or lone_surrogate(text) is None:
                continue
            shown = ascii(text[:40])
            if name == "work" and args.command == "submit":
                raise RotaError(
                    f"Work id {shown} must match {WORK_ID.pattern} (and be UTF-8)",
                    code=DomainCode.INVALID_WORK_ID,
                )
            if name == "work":
                raise RotaError(f"no Work {shown} in this store", code=DomainCode.UNKNOWN_WORK)
            option = (
                name.upper() if name in POSITIONALS else "--" + name.rstrip("_").replace("_", "-")
            )
            raise UsageError(f"{option} {shown} is not valid UTF-8: rota takes text in UTF-8")


def output_closed() -> None:
    """Make stdout a sink (/dev/null), so nothing written or flushed later fails."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _logs_json(args: argparse.Namespace) -> bool:
    """Whether the command logs JSON lines (`rota run`/`serve` with `--log-format json`, or
    `$ROTA_LOG_FORMAT=json`): then its refusal is a JSON record too."""
    if not hasattr(args, "log_format"):
        return False
    from rota.cli.run_logs import settings_of

    try:
        return settings_of(args).format == "json"
    except RotaError:  # a bad $ROTA_LOG_FORMAT: the command refuses it, in text
        return False


def report(code: str, message: str, *, json_errors: bool = False, log_json: bool = False) -> None:
    """The one line on stderr that a failure prints: `rota: <code>: <message>`, or with
    `--json` the object `{"error": {"code": ..., "message": ...}}`, or under `--log-format
    json` a log record (`level` `error`, logger `rota.cli`, the `code` as a field)."""
    message = " ".join(message.split())  # one line, whatever the message holds
    if log_json:
        from rota.cli.run_logs import json_record

        line = json_record("rota.cli", "ERROR", message, code=str(code))
    elif json_errors:
        error = {"error": {"code": str(code), "message": message}}
        line = json.dumps(error, ensure_ascii=True)
    else:
        line = f"rota: {code}: {message}"
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)
