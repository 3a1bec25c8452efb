"""`rota audit prove` and `rota audit consistency`: Merkle proofs against checkpoints.

Both read the checkpoints of `[audit] checkpoint_dir` (or `--dir`), print a human summary
or, with `--json`, the proof in the shared JSON form (`rota.replay.proofs`), checked by
rota before it is printed.
"""

from __future__ import annotations

import argparse
from typing import Any

from rota.cli.common import UsageError, load_config, open_log, position, print_json


def _directory(args: argparse.Namespace) -> str:
    directory = args.dir or load_config(args).audit.checkpoint_dir
    if not directory:
        raise UsageError("no checkpoint directory: give --dir or set [audit] checkpoint_dir")
    return str(directory)


def _checkpoint(args: argparse.Namespace, given: str, store: Any) -> Any:
    """A checkpoint named by a file, or by its size among the directory's."""
    from rota.replay import checkpoint as cp
    from rota.replay.proofs import at_size

    if given.isdigit():
        return at_size(_directory(args), store, int(given))
    return cp.load(given)


def cmd_audit_prove(args: argparse.Namespace) -> int:
    from rota.replay import checkpoint as cp
    from rota.replay.proofs import covering, inclusion

    with open_log(args) as store:
        if args.checkpoint:
            checkpoint = cp.load(args.checkpoint)
        else:
            checkpoint = covering(_directory(args), store, args.position)
        proof = inclusion(store, args.position, checkpoint)
    if args.json:
        print_json(proof)
    else:
        print(
            f"position {proof['position']} (event hash {proof['event_hash']}) is in the log of "
            f"{proof['tree_size']} events: inclusion path of {len(proof['path'])} hashes to the "
            f"checkpoint's root {checkpoint.root} (verified)"
        )
        for step in proof["path"]:
            print(f"  {step}")
        print(proof["checkpoint"], end="")
    return 0


def cmd_audit_consistency(args: argparse.Namespace) -> int:
    from rota.replay.proofs import consistency

    with open_log(args) as store:
        old = _checkpoint(args, args.old, store)
        new = _checkpoint(args, args.new, store)
        proof = consistency(store, old, new)
    if args.json:
        print_json(proof)
    else:
        print(
            f"the log of {proof['new_size']} events extends the log of {proof['old_size']}: "
            f"consistency proof of {len(proof['path'])} hashes from root {old.root} to root "
            f"{new.root} (verified)"
        )
        for step in proof["path"]:
            print(f"  {step}")
    return 0


def register(audit_commands: Any) -> None:
    prove = audit_commands.add_parser(
        "prove",
        help="prove one event is in the log (Merkle inclusion proof against a checkpoint)",
        description="Print an inclusion proof of the event at POSITION against the newest "
        "checkpoint of the directory that covers it (or --checkpoint FILE); --json prints "
        "the rota-inclusion/1 form a verifier (rota.verify) checks without the log.",
    )
    prove.add_argument("position", type=position, metavar="POSITION")
    prove.add_argument("--checkpoint", metavar="FILE", help="prove against this checkpoint")
    prove.add_argument("--dir", metavar="DIR", help="checkpoint directory ([audit] checkpoint_dir)")
    prove.add_argument("--json", action="store_true", help="the proof as JSON")
    prove.set_defaults(handler=cmd_audit_prove)

    consistency = audit_commands.add_parser(
        "consistency",
        help="prove the log at a newer checkpoint extends an older one (Merkle consistency)",
        description="OLD and NEW are checkpoint files, or sizes of checkpoints in the "
        "directory; --json prints the rota-consistency/1 form.",
    )
    consistency.add_argument("old", metavar="OLD")
    consistency.add_argument("new", metavar="NEW")
    consistency.add_argument(
        "--dir", metavar="DIR", help="checkpoint directory ([audit] checkpoint_dir)"
    )
    consistency.add_argument("--json", action="store_true", help="the proof as JSON")
    consistency.set_defaults(handler=cmd_audit_consistency)
