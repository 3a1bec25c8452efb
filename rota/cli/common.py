"""What every CLI command shares: options, opening config/store/scheduler, output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, NoReturn

import msgspec

from rota import bootstrap
from rota.application.ports import EventStore
from rota.domain.errors import RotaError
from rota.infrastructure.config import Config, ConfigError, EntryCode
from rota.infrastructure.executors import builtin_registrations
from rota.scheduler import Scheduler
from rota.scheduler import open as open_scheduler

USAGE_CODES = frozenset({EntryCode.USAGE, ConfigError.code})


class UsageError(RotaError):
    code = EntryCode.USAGE


class Parser(argparse.ArgumentParser):
    """argparse with rota's one-line errors (still exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"rota: {EntryCode.USAGE}: {message} (see '{self.prog} --help')\n")


def projections_option(parser: argparse.ArgumentParser) -> None:
    """`--projections FILE`, for the commands that read or rebuild the projection store."""
    parser.add_argument(
        "--projections",
        metavar="FILE",
        help="the projection store (default: LOG.projections beside an SQLite log, the "
        "log's own schema on PostgreSQL)",
    )


# -- opening the config, the store and the scheduler --------------------------------------


def load_config(args: argparse.Namespace) -> Config:
    return Config.load(args.config)


def store_url(args: argparse.Namespace, config: Config) -> str:
    return args.store or os.environ.get("ROTA_STORE") or config.store_url


def open_log(args: argparse.Namespace) -> EventStore:
    """The log the arguments name, for a command that only reads it: a store that does not
    exist is `store_not_found`, never created (only submit, run and import create one)."""
    config = load_config(args)
    return bootstrap.open_log(store_url(args, config), config, create=False)


def open_rota(args: argparse.Namespace, *, runs: bool = False) -> Scheduler:
    """The scheduler the arguments name. `runs`: for a command that runs or accepts Work
    (`run`, `submit`), which refuses a config naming an executor the CLI does not have
    (it registers only the built-in ones) before the store is opened, and creates the store
    if it does not exist; every other command refuses a missing store (`store_not_found`)."""
    config = load_config(args)
    url = store_url(args, config)
    if runs:
        config.check_executors(builtin_registrations())
    else:
        bootstrap.open_log(url, config, create=False).close()
    return open_scheduler(url, config=config)


def print_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


def parse_json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} is not valid JSON: {exc}") from None
