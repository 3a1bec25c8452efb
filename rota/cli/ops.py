"""Operations commands: `rota doctor` (read-only diagnosis) and `rota recover-corrupt`.

`doctor` exits 0 when no check fails (warnings allowed), 1 otherwise. `recover-corrupt`
isolates the projection file (on PostgreSQL: the projection rows, into a backup table) and
rebuilds it from the log; every refusal is one line on stderr (`rota: <code>: ...`, exit 1)
and comes before anything changes.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import msgspec

from rota.cli.common import load_config, print_json, projections_option, store_url
from rota.cli.run_logs import log_options, progress_logging

if TYPE_CHECKING:
    from rota.replay.daemon_lock import DaemonLock

MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def daemon_lock(args: argparse.Namespace) -> DaemonLock:
    """The lock `rota run` holds, shared, for its whole life (`with daemon_lock(args), ...`):
    recover-corrupt refuses while any daemon holds it, and a daemon does not start while
    recover-corrupt holds it."""
    from rota.replay.daemon_lock import DaemonLock

    return DaemonLock.for_store(store_url(args, load_config(args)))


def cmd_doctor(args: argparse.Namespace) -> int:
    from rota.cli.retention import policies_of
    from rota.replay.doctor import doctor

    config = load_config(args)
    with progress_logging(args) as progress:
        report = doctor(
            store_url(args, config),
            projections=args.projections,
            checkpoint_dir=config.audit.checkpoint_dir,
            settings=config.settings,
            bindings=config.bindings,
            progress=progress,
            retention=policies_of(config),
        )
    if args.json:
        print_json(report)
    else:
        for check in report.checks:
            print(f"[{MARKS.get(check.status, check.status)}] {check.name}: {check.detail}")
            if check.advice and check.status != "ok":
                print(f"       -> {check.advice}")
        print("ok" if report.ok else "NOT OK: see the FAIL lines (docs/runbook-corruption.md)")
    return 0 if report.ok else 1


def cmd_recover_corrupt(args: argparse.Namespace) -> int:
    from rota.replay.recover_corrupt import recover_corrupt

    config = load_config(args)
    with progress_logging(args) as progress:
        report = recover_corrupt(
            store_url(args, config),
            args.backup_name,
            projections=args.projections,
            checkpoint_dir=config.audit.checkpoint_dir,
            dry_run=args.dry_run,
            force=args.force,
            progress=progress,
        )
    if args.json:
        print_json(msgspec.to_builtins(report))
    else:
        print("\n".join(report.lines()))
    return 0 if report.dry_run or report.verified else 1


def register(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="read-only health report of the log, checkpoint and projections (exit 1 on FAIL)",
        description="Check the log file, hash chain and newest checkpoint, the projection "
        "store's integrity, drift against a replay and lag, expired leases, overdue timers, "
        "capacity, budget and crash-loop holds. Opens every file read-only (on PostgreSQL: "
        "read-only transactions; the projections are the log schema's tables).",
    )
    projections_option(doctor)
    doctor.add_argument("--json", action="store_true", help='{"ok": ..., "checks": [...]}')
    log_options(doctor)
    doctor.set_defaults(handler=cmd_doctor)

    recover = commands.add_parser(
        "recover-corrupt",
        help="isolate a damaged projection file and rebuild every projection from the log",
        description="With no daemon running and a log that verifies: create "
        "diagnostics/scheduler-recovery/NAME beside the store, move the projection file "
        "there (with a SHA-256 manifest), rebuild every projection from the log and verify "
        "it against a replay. On PostgreSQL the projection rows move into the backup table "
        "rota_projection_recovery under NAME instead. Appends nothing to the log. Refuses "
        "projections doctor finds healthy (projection_integrity and projection_drift pass) "
        "unless --force. See docs/runbook-corruption.md.",
    )
    recover.add_argument(
        "--backup-name",
        required=True,
        metavar="NAME",
        help="a new directory name: [A-Za-z0-9][A-Za-z0-9._-]{0,127}",
    )
    projections_option(recover)
    recover.add_argument("--dry-run", action="store_true", help="check and print the plan only")
    recover.add_argument(
        "--force",
        action="store_true",
        help="isolate and rebuild even projections doctor finds healthy (refused otherwise: "
        "projection_healthy)",
    )
    recover.add_argument("--json", action="store_true", help="print the report as JSON")
    log_options(recover)
    recover.set_defaults(handler=cmd_recover_corrupt)
