"""`rota config validate` and `rota config show`: the configuration a command would use."""

from __future__ import annotations

import argparse
import os
from typing import Any

import msgspec

from rota.cli.common import config_path, load_config, print_json, store_url
from rota.cli.run_logs import settings_of
from rota.infrastructure.config import DEFAULT_CONFIG, shown
from rota.infrastructure.executors import builtin_registrations
from rota.infrastructure.stores import redact_url


def cmd_validate(args: argparse.Namespace) -> int:
    config = load_config(args)  # an invalid file is invalid_config (exit 2), naming the field
    builtin = builtin_registrations()
    elsewhere = sorted(n for n, b in config.bindings.items() if b.executor not in builtin)
    result = {
        "ok": True,
        "config": config.source,
        "bindings": sorted(config.bindings),
        "not_run_by_cli": elsewhere,
    }
    if args.json:
        print_json(result)
        return 0
    print(f"ok: {config.source}: {len(config.bindings)} bindings, {len(config.budgets)} budgets")
    if elsewhere:
        print(
            f"note: rota run and rota submit refuse this file: bindings {', '.join(elsewhere)} "
            "name an executor only an embedding process registers"
        )
    return 0


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
