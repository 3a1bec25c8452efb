"""`rota retention show | plan | run`: the operator's side of retention (docs/operator.md).

`show` lists the policies (`[[retention]]`), the prunes recorded and the payload bytes
retained and pruned; `plan` is a dry run (Works, events and bytes per policy, nothing
written); `run --archive DIR` prunes what is due (`rota.replay.retention`: a checkpoint,
the archive, `core.retention.pruned`, the rewrite, the SQLite space given back). `--json` on
each. The archive directory is `--archive`, else `[audit] archive_dir`; checkpoints go to
`[audit] checkpoint_dir` (else `DIR/checkpoints`), signed with `[audit] key` if set.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from rota.cli.common import UsageError, load_config, open_log, open_rota, print_json, store_url
from rota.domain.events import RetentionPolicy
from rota.infrastructure.config import Config
from rota.infrastructure.store_url import backend


def policies_of(config: Config) -> list[RetentionPolicy]:
    """The configuration's `[[retention]]` policies, in order (names must be unique)."""
    found = [RetentionPolicy(**m.model_dump()) for m in config.model.retention]
    names = [p.name for p in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{config.source}: retention policy name(s) {twice} appear twice")
    return found


def _mib(n: int) -> str:
    return f"{n / 1_048_576:.2f} MiB" if n >= 1_048_576 else f"{n} bytes"


def cmd_show(args: argparse.Namespace) -> int:
    from rota.replay.retention import status

    config = load_config(args)
    policies = policies_of(config)
    with open_log(args) as store:
        found = status(store)
    if args.json:
        print_json({"policies": policies, **msgspec.to_builtins(found)})
        return 0
    if not policies:
        print("no retention policy configured ([[retention]] in the config)")
    for p in policies:
        where = ", ".join(
            f"{k} {v}"
            for k, v in (("scope", p.scope), ("binding", p.binding), ("schedule", p.schedule))
            if v is not None
        )
        print(f"policy {p.name}: terminal Works {where or 'everywhere'}, keep {p.keep_days:g} days")
    print(
        f"{found.prunes} prune(s), {found.events_pruned} events pruned; payloads retained "
        f"{_mib(found.bytes_retained)}, pruned {_mib(found.bytes_pruned)}"
    )
    if found.last_prune_position is not None:
        print(
            f"last prune: position {found.last_prune_position} at {found.last_prune_at}, "
            f"policy {found.last_policy}, archive {found.last_archive}"
        )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from rota.replay.retention import plan

    policies = policies_of(load_config(args))
    with open_log(args) as store:
        planned = plan(store, policies, store.now())
    rows = [{**msgspec.to_builtins(p), "bytes_freed": p.bytes_freed} for p in planned.policies]
    if args.json:
        print_json({"policies": rows, "events": planned.events})
        return 0
    if not policies:
        print("no retention policy configured: nothing to prune")
    for p in planned.policies:
        print(
            f"policy {p.policy}: {p.works} Works, {p.events} events, payloads "
            f"{_mib(p.bytes_before)} -> {_mib(p.bytes_after)} (frees {_mib(p.bytes_freed)})"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rota.replay.retention import run

    config = load_config(args)
    policies = policies_of(config)
    archive = args.archive or config.audit.archive_dir
    if archive is None:
        raise UsageError("name the archive directory: --archive DIR or [audit] archive_dir")
    with open_log(args) as store:
        done = run(
            store,
            policies,
            store.now(),
            archive,
            checkpoint_dir=config.audit.checkpoint_dir,
            key_path=config.audit.key,
        )
    if done.prunes or done.resumed:
        # The stored projections take the prune in now (a daemon running takes it in its
        # next pass anyway): until then they hold payloads the log no longer has, and
        # `rota doctor` would report them as drift.
        open_rota(args).close()
    if args.json:
        print_json({**msgspec.to_builtins(done), "archive_dir": archive})
        return 0
    if done.resumed:
        print(f"finished an interrupted prune: {done.resumed} events")
    if not done.prunes:
        print("nothing due: no event pruned")
    for position, name in zip(done.prunes, done.archives, strict=True):
        print(f"prune recorded at position {position}; archive {archive}/{name}")
    if done.events:
        print(
            f"{done.events} events pruned, {_mib(done.bytes_freed)} of payload freed; "
            f"{done.reclaimed_pages} file pages given back"
        )
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    from rota.replay.retention import reclaim

    with open_log(args) as store:
        space = store.storage()
    if space is None:
        if args.json:
            print_json({"vacuum": None, "given_back_pages": 0})
        else:
            print("this store has no file to shrink (PostgreSQL reuses freed space itself)")
        return 0
    if args.enable and space.vacuum != "incremental":
        # On the file itself, through the store URL's backend (the store closed meanwhile).
        backend(store_url(args, load_config(args))).enable_incremental_vacuum()
    with open_log(args) as store:
        given = reclaim(store, steps=1_000_000)
        space = store.storage()
    assert space is not None
    if args.json:
        print_json({**msgspec.to_builtins(space), "given_back_pages": given})
    else:
        mode = space.vacuum
        hint = "" if mode == "incremental" else " (run with --enable, daemon stopped, once)"
        print(
            f"auto_vacuum {mode}{hint}; {given} pages given back; {space.pages} pages of "
            f"{space.page_size} bytes, {space.free} free"
        )
    return 0


def register(commands: Any) -> None:
    retention = commands.add_parser(
        "retention", help="retention policies: show, plan (dry run) and run prunes"
    )
    sub = retention.add_subparsers(dest="retention_command", required=True, metavar="COMMAND")
    show = sub.add_parser("show", help="the policies, the prunes recorded, bytes retained/pruned")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_show)
    dry = sub.add_parser("plan", help="a dry run: Works, events and bytes per policy")
    dry.add_argument("--json", action="store_true")
    dry.set_defaults(handler=cmd_plan)
    run = sub.add_parser(
        "run",
        help="prune what is due: checkpoint, archive, record, rewrite payloads",
        description="Prune the payloads of terminal Works past their policy's keep_days. "
        "The original events and their inclusion proofs go to the archive directory first.",
    )
    run.add_argument("--archive", metavar="DIR", help="archive directory ([audit] archive_dir)")
    run.add_argument("--json", action="store_true")
    run.set_defaults(handler=cmd_run)
    vacuum = sub.add_parser(
        "vacuum",
        help="SQLite: give freed pages back to the file system, a few at a time",
        description="Give back the pages prunes freed (incremental vacuum, short steps). "
        "--enable switches a file created before rota set auto_vacuum=INCREMENTAL: one "
        "full VACUUM that rewrites the file and holds its lock: stop the daemon first.",
    )
    vacuum.add_argument("--enable", action="store_true", help="switch incremental on (once)")
    vacuum.add_argument("--json", action="store_true")
    vacuum.set_defaults(handler=cmd_vacuum)
