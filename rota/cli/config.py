"""`rota config validate` and `rota config show`: the configuration a command would use.

`validate` also refuses a `[[schedules]]` table whose binding no `[[bindings]]` table
defines (`schedules[N].binding`), and compares the config's schedules with the store's
when the store exists (not with `--no-store`): a schedule a config defined that this one no
longer has is noted (`rota schedule apply --prune` removes it). It writes nothing."""

from __future__ import annotations

import argparse
import os
from typing import Any

import msgspec

from rota.application.errors import PortCode
from rota.cli.common import config_path, load_config, open_rota, print_json, store_url
from rota.cli.run_logs import settings_of
from rota.cli.schedule import not_in_config_line
from rota.domain.errors import RotaError
from rota.infrastructure.config import DEFAULT_CONFIG, Config, ConfigError, shown
from rota.infrastructure.executors import builtin_registrations
from rota.infrastructure.schedule_config import unknown_bindings
from rota.infrastructure.stores import redact_url


def cmd_validate(args: argparse.Namespace) -> int:
    config = load_config(args)  # an invalid file is invalid_config (exit 2), naming the field
    problems = unknown_bindings(config.model.schedules, config.bindings)
    app = config.model.app.module
    if problems and app is None:
        raise ConfigError(f"{config.source}: " + "; ".join(problems))
    # With [app], a schedule may name a binding the app registers in Python: a note.
    by_app = problems if app is not None else []
    builtin = builtin_registrations()
    elsewhere = sorted(n for n, b in config.bindings.items() if b.executor not in builtin)
    stale, unread = ([], None) if args.no_store else _not_in_config(args, config)
    result: dict[str, Any] = {
        "ok": True,
        "config": config.source,
        "bindings": sorted(config.bindings),
        "schedules": sorted(config.schedules),
        "not_run_by_cli": elsewhere,
        "not_in_config": stale,
        "bindings_left_to_the_app": by_app,
    }
    if unread is not None:
        result["store_not_read"] = unread
    if args.json:
        print_json(result)
        return 0
    print(
        f"ok: {config.source}: {len(config.bindings)} bindings, {len(config.budgets)} budgets, "
        f"{len(config.schedules)} schedules"
    )
    if elsewhere:
        print(
            f"note: rota run and rota submit refuse this file: bindings {', '.join(elsewhere)} "
            "name an executor only an embedding process registers"
        )
    for problem in by_app:
        print(f"note: {problem}, unless the app ({app}) registers it")
    for name in stale:
        print(f"note: {not_in_config_line(name)}")
    if unread is not None:
        print(f"note: the store was not read, so its schedules were not compared: {unread}")
    return 0


def _not_in_config(args: argparse.Namespace, config: Config) -> tuple[list[str], str | None]:
    """The schedules the store has from a config that this config does not define, read
    without writing (a store that does not exist yet has none); and, when the store could
    not be read, why (`code: message`)."""
    try:
        with open_rota(args, read_only=True) as scheduler:
            return scheduler.schedules.not_in_config(config.schedules), None
    except RotaError as exc:
        if exc.code == PortCode.STORE_NOT_FOUND:
            return [], None
        return [], " ".join(f"{exc.code}: {exc}".split())  # one line


def cmd_show(args: argparse.Namespace) -> int:
    path, path_origin = config_path(args)
    config = load_config(args)
    rows: list[tuple[str, Any, str]] = [("config", path or str(DEFAULT_CONFIG), path_origin)]
    for key, value, origin in shown(config.model):
        if key != "store.url":
            rows.append((key, value, origin))
            continue
        # --store, else $ROTA_STORE, else the file's (rota.cli.common.store_url)
        url = redact_url(store_url(args, config))
        where = "flag" if args.store else "environment" if os.environ.get("ROTA_STORE") else origin
        rows.append((key, url, where))
    rows += settings_of(args).rows()  # `rota run`'s --log-format, else $ROTA_LOG_FORMAT ...
    if args.json:
        print_json([{"key": k, "value": v, "source": o} for k, v, o in rows])
        return 0
    width = max(len(k) for k, _, _ in rows)
    for key, value, origin in rows:
        print(f"{key:<{width}} = {msgspec.json.encode(value).decode()}  ({origin})")
    return 0


def register(commands: Any) -> None:
    config = commands.add_parser(
        "config",
        help="check or show the configuration",
        description="The configuration is '--config FILE', else $ROTA_CONFIG, else ./rota.toml "
        "(a missing ./rota.toml means the defaults).",
    )
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    validate = config_commands.add_parser(
        "validate", help="check the config file (exit 2 and the field path when invalid)"
    )
    validate.add_argument("--json", action="store_true")
    validate.add_argument(
        "--no-store",
        action="store_true",
        help="check the file only: do not read the store to compare its schedules",
    )
    validate.set_defaults(handler=cmd_validate)
    show = config_commands.add_parser(
        "show",
        help="every value and where it came from: default, file, environment or flag",
        description="Every configuration value with its source, and the log format and "
        "level rota run uses ($ROTA_LOG_FORMAT, $ROTA_LOG_LEVEL). Store URLs are shown "
        "without their password; a binding's environment values are <redacted>.",
    )
    show.add_argument("--json", action="store_true", help='[{"key", "value", "source"}, ...]')
    show.set_defaults(handler=cmd_show)
