"""What every CLI command shares: options, opening config/store/scheduler, output."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, NoReturn

import msgspec

from rota import bootstrap
from rota.application.ports import EventStore
from rota.domain.errors import DomainCode, RotaError
from rota.domain.results import MAX_DATA_BYTES, lone_surrogate
from rota.embedded.opening import open as open_scheduler
from rota.infrastructure.config import Config, ConfigError, EntryCode
from rota.infrastructure.executors import builtin_registrations
from rota.infrastructure.store_url import backend, redact_url
from rota.scheduler import Scheduler

USAGE_CODES = frozenset({EntryCode.USAGE, EntryCode.NO_CONFIG_FILE, ConfigError.code})


class UsageError(RotaError):
    code = EntryCode.USAGE


class Parser(argparse.ArgumentParser):
    """argparse whose errors are `UsageError`s, reported by rota.cli.run (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# Positions and counts are 64-bit in every store: a larger number is a usage error.
MAX_POSITION = 2**63 - 1


def position(text: str) -> int:
    """An argparse type: a log position, 0 to MAX_POSITION."""
    return _bounded(text, "a log position")


def count(text: str) -> int:
    """An argparse type: a count, 0 to MAX_POSITION."""
    return _bounded(text, "a count")


def _bounded(text: str, what: str) -> int:
    try:
        value = int(text) if len(text) <= 20 else None
    except ValueError:
        value = None
    if value is None or not 0 <= value <= MAX_POSITION:
        raise argparse.ArgumentTypeError(
            f"{what} is a whole number from 0 to {MAX_POSITION}, not {text[:40]!a}"
        )
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds over 0 and finite (`--timeout`); argparse
    names the option in the usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"a number of seconds over 0 (and finite), not {text[:40]!a}"
        )
    return value


def cannot_write(path: str, exc: OSError) -> RotaError:
    """An output file that could not be created (`cannot_write`), naming the path."""
    return RotaError(f"cannot write {path}: {exc.strerror}", code=EntryCode.CANNOT_WRITE)


def projections_option(parser: argparse.ArgumentParser) -> None:
    """`--projections FILE`, for the commands that read or rebuild the projection store."""
    parser.add_argument(
        "--projections",
        metavar="FILE",
        help="the projection store (default: LOG.projections beside an SQLite log, the "
        "log's own schema on PostgreSQL)",
    )


# -- opening the config, the store and the scheduler --------------------------------------


def config_path(args: argparse.Namespace) -> tuple[str | None, str]:
    """The config file the arguments name and where that came from: `--config FILE`
    (flag), else `$ROTA_CONFIG` (environment), else ./rota.toml (default: None)."""
    if args.config:
        return args.config, "flag"
    if os.environ.get("ROTA_CONFIG"):
        return os.environ["ROTA_CONFIG"], "environment"
    return None, "default"


def load_config(args: argparse.Namespace) -> Config:
    """The config: a file named by `--config` or `$ROTA_CONFIG` must exist; a missing
    ./rota.toml is the defaults."""
    return Config.load(config_path(args)[0])


# The commands a store kept in memory (`memory://`) means something to: `rota run`, whose
# process (the daemon) lives on, and `rota config`, which shows the URL and opens nothing.
MEMORY_STORE_COMMANDS = frozenset({"run", "config"})


def store_url(args: argparse.Namespace, config: Config) -> str:
    """The store the arguments name (`--store`, `ROTA_STORE`, the config's `[store] url`).

    A store that no other process can open (`memory://`) is refused for every command but
    `rota run` (`store_in_memory`): a submit or an import into it would be gone when the
    command exits, and a read would find a store nobody wrote."""
    url = args.store or os.environ.get("ROTA_STORE") or config.store_url
    command = getattr(args, "command", None)
    if command not in MEMORY_STORE_COMMANDS and not backend(url).processes_share:
        raise RotaError(
            f"{redact_url(url)} keeps its store only inside the process that opens it, so "
            f"'rota {command}' would see nothing another command wrote and keep nothing "
            "it writes: use memory:// from Python (rota.open) or with 'rota run', and a file "
            "or postgresql:// store for the other commands",
            code=EntryCode.STORE_IN_MEMORY,
        )
    return url


def open_log(args: argparse.Namespace) -> EventStore:
    """The log the arguments name, for a command that only reads it: a store that does not
    exist is `store_not_found`, never created (only submit, run and import create one)."""
    config = load_config(args)
    return bootstrap.open_log(store_url(args, config), config, create=False)


def open_rota(
    args: argparse.Namespace, *, runs: bool = False, read_only: bool = False
) -> Scheduler:
    """The scheduler the arguments name. `runs`: for a command that runs or accepts Work
    (`run`, `submit`), which loads the app (`--app` or `[app] module`, rota.cli.app: its
    module is imported before the store is opened, its function called after) and refuses
    a config binding naming an executor neither rota nor the app registers
    (`unknown_executor`; without an app, before the store is opened), and creates the
    store if it does not exist; every other command refuses a missing store
    (`store_not_found`)."""
    config = load_config(args)
    url = store_url(args, config)
    app = None
    if runs:
        from rota.cli.app import load_app

        app = load_app(args, config)
        if app is None:
            config.check_executors(builtin_registrations())
    else:
        bootstrap.open_log(url, config, create=False).close()
    scheduler = open_scheduler(url, config=config, read_only=read_only)
    if app is not None:
        try:
            app.register_on(scheduler)
            scheduler.check_bindings()
        except BaseException:
            scheduler.close()
            raise
    return scheduler


def print_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_strings(value: Any, option: str) -> None:
    """Refuse lone surrogates (`"\\ud800"`) and non-finite numbers anywhere in `value`,
    without recursion (the parser already bounded the depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts = [item]
        elif isinstance(item, dict):
            texts = list(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            texts = []
            stack.extend(item)
        else:
            if isinstance(item, float) and not math.isfinite(item):
                raise UsageError(f"{option}: {item!r} is not a finite JSON number")
            continue
        for text in texts:
            if lone_surrogate(text) is not None:
                raise UsageError(f"{option} holds a lone surrogate ({text!a}): not valid Unicode")


def parse_json(text: str, option: str) -> Any:
    """`text` as strict JSON: refusals are one-line `usage` errors, a document nested too
    deep for the parser `payload_too_deep` (the store refuses anything over its own depth
    limit anyway)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{option} is not valid UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise RotaError(
            f"{option} is nested too deep to parse", code=DomainCode.PAYLOAD_TOO_DEEP
        ) from None
    except ValueError as exc:  # JSONDecodeError, and a number over Python's digit limit
        raise UsageError(f"{option} is not valid JSON: {exc}") from None
    _check_strings(value, option)
    return value


def read_input(value: str, option: str = "--input") -> Any:
    """The JSON payload `value` names: inline JSON, `@FILE` (a file's contents) or `-`
    (stdin), at most MAX_DATA_BYTES (the store's payload limit) when read."""
    if value != "-" and not value.startswith("@"):
        return parse_json(value, option)
    where = f"{option} - (stdin)" if value == "-" else f"{option} {value}"
    try:
        if value == "-":
            data = sys.stdin.buffer.read(MAX_DATA_BYTES + 1)
        else:
            with open(value[1:], "rb") as file:
                data = file.read(MAX_DATA_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RotaError(f"{where}: cannot read: {reason}", code=EntryCode.CANNOT_READ) from None
    if len(data) > MAX_DATA_BYTES:
        raise RotaError(
            f"{where} is over {MAX_DATA_BYTES} bytes, the store's payload limit",
            code=DomainCode.PAYLOAD_TOO_LARGE,
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where} is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    return parse_json(text, where)
