"""Commands on the log itself: events, audit (verify, checkpoint, keygen), export, import."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import msgspec

from rota.application.ports import RecordedEvent
from rota.application.queries.work_views import event_data, event_view
from rota.cli import audit_proofs
from rota.cli.common import (
    UsageError,
    cannot_write,
    count,
    open_log,
    position,
    print_json,
)
from rota.cli.run_logs import log_options, progress_logging


def cmd_events(args: argparse.Namespace) -> int:
    with open_log(args) as store:
        after, rows = args.after, list[RecordedEvent]()
        while (args.limit is None or len(rows) < args.limit) and (batch := store.read(after, 5000)):
            rows.extend(batch)
            after = batch[-1].position
        if args.limit is not None:
            rows = rows[: args.limit]
    if args.json:
        print_json([event_view(r) for r in rows])
    else:
        for r in rows:
            data = msgspec.json.encode(event_data(r.event)).decode()
            print(f"{r.position:>8}  {r.recorded_at}  {r.stream}@{r.version}  {data}")
    return 0


# -- audit -------------------------------------------------------------------------------


def _checkpoints(args: argparse.Namespace) -> tuple[list[Any], str | None]:
    """The checkpoints named, their signatures checked against --public-key if given."""
    from rota.replay import checkpoint as cp

    if args.checkpoint:
        found = [cp.load(args.checkpoint)]
    elif args.checkpoints:
        found = cp.load_all(args.checkpoints)
        if not found:
            raise cp.CheckpointError(f"no checkpoint files in {args.checkpoints}")
    else:
        if args.public_key:
            raise UsageError("--public-key needs --checkpoint or --checkpoints")
        return [], None
    if not args.public_key:
        return found, "not_checked"
    key = cp.load_public_key(args.public_key)
    for checkpoint in found:
        cp.verify_signature(checkpoint, key)
    return found, "verified"


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from rota.replay.audit import verify_chain_with
    from rota.replay.export import verify_export

    checkpoints, signatures = _checkpoints(args)
    with progress_logging(args) as progress:
        if args.file:
            report = verify_export(args.file, checkpoint=checkpoints, progress=progress)
        else:
            with open_log(args) as store:
                report = verify_chain_with(store, progress, checkpoint=checkpoints)
    if args.json:
        print_json({**msgspec.to_builtins(report), "signatures": signatures})
    elif report.ok:
        line = f"ok: {report.checked} events, head {report.head_position} {report.head_hash}"
        if report.from_position:
            line += f" (the events after position {report.from_position})"
        if report.checkpoint_ok:
            line += (
                f"; extends {report.checkpoints} checkpoint(s), the latest at position "
                f"{report.checkpoint_position} (signatures {(signatures or '').replace('_', ' ')})"
            )
        elif checkpoints:
            line += "; no checkpoint could be compared (all lie before the export's first event)"
        print(line)
        if report.pruned_summary:
            print(report.pruned_summary)
    else:
        where = f" at position {report.first_bad_position}" if report.first_bad_position else ""
        print(f"FAILED{where}: {report.reason}")
    return 0 if report.ok else 1


def cmd_audit_checkpoint(args: argparse.Namespace) -> int:
    from rota.replay.checkpoint import Checkpointer, file_name

    with open_log(args) as store:
        written = Checkpointer(store, args.dir, key_path=args.key).write()
    kind = "json" if written.root is None else "note"
    path = os.path.join(args.dir, file_name(written.position, written.store_id, kind=kind))
    if args.json:
        print_json({**msgspec.to_builtins(written), "path": path})
    else:
        signed = f", signed by key {written.key_id}" if written.key_id else ", unsigned"
        root = f", Merkle root {written.root}" if written.root else ""
        print(
            f"checkpoint at position {written.position} {written.head_hash}{root}{signed}: {path}"
        )
    return 0


def cmd_audit_keygen(args: argparse.Namespace) -> int:
    from rota.replay.checkpoint import key_id, keygen, load_public_key

    try:
        private, public = keygen(args.out)
    except OSError as exc:
        raise cannot_write(args.out, exc) from None
    ident = key_id(load_public_key(public))
    if args.json:
        print_json({"private_key": str(private), "public_key": str(public), "key_id": ident})
    else:
        print(f"key {ident}: private {private} (keep it secret), public {public}")
    return 0


# -- export and import -------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    from rota.replay.export import export, export_to_file
    from rota.replay.retention_archive import Archive

    with progress_logging(args) as progress, open_log(args) as store:
        archive = None if args.archive is None else Archive(args.archive, store.store_id)
        if args.out:
            try:
                header = export_to_file(
                    store, args.out, after=args.from_, progress=progress, archive=archive
                )
            except OSError as exc:
                raise cannot_write(args.out, exc) from None
        else:
            # A reader that goes away (`rota export | head`) ends it silently (rota.cli.run).
            export(store, sys.stdout.buffer, after=args.from_, progress=progress, archive=archive)
            sys.stdout.buffer.flush()
            return 0
    summary = {
        "path": args.out,
        "events": header.head_position - header.from_,
        "from": header.from_,
        "head_position": header.head_position,
        "head_hash": header.head_hash,
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"exported {summary['events']} events (after position {header.from_}) to "
            f"{args.out}, head {header.head_position} {header.head_hash}"
        )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from rota.cli.import_command import cmd_import as run_import  # all or nothing; resumes

    return run_import(args)


# -- the parser --------------------------------------------------------------------------


def register(commands: Any) -> None:
    events = commands.add_parser("events", help="print the log")
    events.add_argument(
        "--after", type=position, default=0, metavar="N", help="only events after this position"
    )
    events.add_argument(
        "--limit", type=count, metavar="N", help="at most this many events (0: none; default: all)"
    )
    events.add_argument("--json", action="store_true", help="a JSON list")
    events.set_defaults(handler=cmd_events)

    audit = commands.add_parser("audit", help="prove the log was not altered")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")
    verify = audit_commands.add_parser(
        "verify",
        help="check the hash chain and stream versions (exit 1 on a bad log)",
        description="Check the whole hash chain and stream version continuity of the store "
        "(or of an export with --file) and name the first bad position; with checkpoints, "
        "also prove the log still extends them (catches truncation and re-chaining).",
    )
    which = verify.add_mutually_exclusive_group()
    which.add_argument("--checkpoint", metavar="FILE", help="a checkpoint the log must extend")
    which.add_argument(
        "--checkpoints", metavar="DIR", help="every checkpoint of a directory (a daemon's)"
    )
    verify.add_argument(
        "--public-key", metavar="FILE", help="require checkpoints signed by this Ed25519 key"
    )
    verify.add_argument(
        "--file", metavar="EXPORT", help="verify an export file offline instead of the store"
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    log_options(verify)
    verify.set_defaults(handler=cmd_audit_verify)

    checkpoint = audit_commands.add_parser(
        "checkpoint", help="write a checkpoint of the log head now (outside the store)"
    )
    checkpoint.add_argument("--dir", required=True, metavar="DIR", help="checkpoint directory")
    checkpoint.add_argument("--key", metavar="FILE", help="sign with this Ed25519 private key")
    checkpoint.add_argument("--json", action="store_true")
    checkpoint.set_defaults(handler=cmd_audit_checkpoint)

    audit_proofs.register(audit_commands)

    keygen = audit_commands.add_parser(
        "keygen", help="create an Ed25519 key pair for signing checkpoints"
    )
    keygen.add_argument(
        "--out", required=True, metavar="FILE", help="private key file (0600); public: FILE.pub"
    )
    keygen.add_argument("--json", action="store_true")
    keygen.set_defaults(handler=cmd_audit_keygen)

    export = commands.add_parser(
        "export",
        help="write the log as JSON lines (verifiable offline, importable)",
        description="Write a header line, then one JSON line per event (envelope, payload "
        "exactly as stored, hash). Verify it with 'rota audit verify --file'.",
    )
    export.add_argument(
        "--from",
        dest="from_",
        type=position,
        default=0,
        metavar="N",
        help="only the events after position N (the header carries the hash at N)",
    )
    export.add_argument("--out", metavar="FILE", help="write to FILE (default: stdout)")
    export.add_argument(
        "--archive",
        metavar="DIR",
        help="restore pruned payloads from this retention archive (else written as pruned)",
    )
    export.add_argument(
        "--json", action="store_true", help="with --out, print the summary as JSON; no bar"
    )
    log_options(export)
    export.set_defaults(handler=cmd_export)

    imp = commands.add_parser(
        "import",
        help="load an export into an empty store, verifying the chain",
        description="Load a whole-log export into an EMPTY store (e.g. to move from SQLite "
        "to PostgreSQL). The file is verified before anything is written; rows keep their "
        "positions, times and hashes. All or nothing: an interrupted import leaves no store "
        "that looks whole (SQLite: it fills FILE.importing, renamed onto FILE at the end; "
        "PostgreSQL: the store is refused, import_incomplete, until it ends), and running "
        "the same import again resumes it. The target is '--to URL' (alias '--store URL' "
        "after the command), else the global 'rota --store URL import ...'; $ROTA_STORE and "
        "the config's store are never used as an import target.",
    )
    imp.add_argument("export", metavar="EXPORT", help="the export file")
    imp.add_argument(
        "--to", "--store", dest="to", metavar="URL", help="the target store (must be empty)"
    )
    imp.add_argument(
        "--append",
        action="store_true",
        help="append a partial export ('rota export --from N' on a node that still holds "
        "them) to a store whose log ends at position N: the events a failover lost "
        "(log_regressed); each link is checked, nothing else is written",
    )
    imp.add_argument("--json", action="store_true", help="print the verified report as JSON")
    log_options(imp)
    imp.set_defaults(handler=cmd_import)
