"""The HTTP API's commands: `rota serve` (read-only over a store, no scheduler loop) and
`rota token add|list|remove` (the bearer tokens of `[http] tokens`). `rota run --http
ADDR` (in rota.cli.run_command) serves the same API from the daemon. See docs/http.md."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from rota.cli.common import load_config, open_rota, print_json
from rota.cli.run_logs import Status, log_options, run_logging

SCOPE_CHOICES = ("read", "operate", "admin")


def _tokens_path(args: argparse.Namespace) -> str:
    path: str = args.tokens or load_config(args).http.tokens
    return path


def start_http(
    scheduler: Any, args: argparse.Namespace, listen: str, status: Status, *, read_only: bool
) -> Any:
    """Start the API for a command and say where it listens (a status line on stderr)."""
    from rota.http import serve

    server = serve(scheduler, listen=listen, tokens=args.tokens, read_only=read_only)
    mode = "read-only" if read_only else "read-write"
    status.say(f"http on {server.url} ({mode})", "http listening", url=server.url, mode=mode)
    return server


def check_http(args: argparse.Namespace, listen: str | None) -> str:
    """Before the store is opened: the extra is installed, the address parses and the token
    file loads. Returns the address to listen on."""
    from rota.http import require_extra

    require_extra()
    from rota.http.server import listen_address
    from rota.http.tokens import TokenFile

    config = load_config(args)
    address = listen or config.http.listen
    listen_address(address)
    TokenFile.load(args.tokens or config.http.tokens)
    return address


def cmd_serve(args: argparse.Namespace) -> int:
    from rota.foreground import stop_on_signals, until_stopped

    listen = check_http(args, args.listen)
    stop = threading.Event()
    with run_logging(args) as status:
        # The handlers first: once it says where it listens, a SIGTERM stops it gracefully.
        with stop_on_signals(stop.set), open_rota(args, read_only=True) as scheduler:
            server = start_http(scheduler, args, listen, status, read_only=True)
            try:
                until_stopped(stop)
            finally:
                server.stop()
        status.say("stopped", "stopped")
    return 0


def cmd_token_add(args: argparse.Namespace) -> int:
    from rota.http.tokens import TokenFile

    tokens = TokenFile.load(_tokens_path(args), missing_ok=True)
    scopes = frozenset(args.scope or ["read"])
    token = tokens.add(args.name, scopes)
    if args.json:
        print_json({"name": args.name, "scopes": sorted(scopes), "token": token})
    else:
        print(token)
        print(
            f"rota: token {args.name!r} added to {tokens.path} (shown once; only its "
            "digest is kept)",
            file=sys.stderr,
        )
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    from rota.http.tokens import SCOPES, TokenFile

    tokens = TokenFile.load(_tokens_path(args), missing_ok=True)
    rows = [{"name": t.name, "scopes": sorted(t.scopes, key=SCOPES.index)} for t in tokens.tokens]
    if args.json:
        print_json(rows)
    else:
        for row in rows:
            print(f"{row['name']}  {','.join(row['scopes'])}")
    return 0


def cmd_token_remove(args: argparse.Namespace) -> int:
    from rota.http.tokens import TokenFile

    tokens = TokenFile.load(_tokens_path(args))
    tokens.remove(args.name)
    print(f"rota: token {args.name!r} removed", file=sys.stderr)
    return 0


def tokens_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokens", metavar="FILE", help="the token file (default: the config's [http] tokens)"
    )


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve the HTTP API and the web view read-only over a store (no scheduler loop)",
        description="Serve /v1, /metrics and the web view under /ui over the store, "
        "read-only: opening appends nothing (not even a changed [[budgets]]), every mutation "
        "answers 403 serve_read_only and the pages show no buttons. Needs the extra: "
        "pip install 'rota[http]'. See docs/http.md, docs/web.md.",
    )
    serve.add_argument(
        "--listen", metavar="ADDR", help="HOST:PORT (default: the config's [http] listen)"
    )
    tokens_option(serve)
    log_options(serve)
    serve.set_defaults(handler=cmd_serve)

    token = commands.add_parser("token", help="the HTTP API's bearer tokens")
    sub = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    add = sub.add_parser("add", help="create a token (printed once on stdout)")
    add.add_argument("name", metavar="NAME", help="who acts with it (recorded in the log)")
    add.add_argument(
        "--scope",
        action="append",
        choices=SCOPE_CHOICES,
        help="read (default), operate or admin; admin includes operate includes read",
    )
    add.add_argument("--json", action="store_true")
    tokens_option(add)
    add.set_defaults(handler=cmd_token_add)
    listing = sub.add_parser("list", help="the tokens' names and scopes (never the tokens)")
    listing.add_argument("--json", action="store_true")
    tokens_option(listing)
    listing.set_defaults(handler=cmd_token_list)
    remove = sub.add_parser("remove", help="remove a token")
    remove.add_argument("name", metavar="NAME")
    tokens_option(remove)
    remove.set_defaults(handler=cmd_token_remove)
