"""CPU a job as callgrind instructions: `bench.lifecycle`'s rota run under valgrind, for
this tree and (optionally) other checkouts, interleaved, with events and log bytes a job.

    python -m bench.instructions                        # this tree, 500 and 2,000 jobs
    python -m bench.instructions --tree /work/base      # base first, then this tree
    python -m bench.instructions --keys 1000 --key-limit 4

Instructions a job = (I(large) - I(small)) / (large - small): the difference removes the
interpreter's start-up, imports and the store's creation, which a run pays once. Callgrind
counts instructions, not time, so the figure repeats on a noisy, shared machine (it
undercounts memory-bound work such as a GC pass, and valgrind hides SHA-NI, so SHA-256 is
overstated). Each run is one subprocess `python -c run_rota(...)` in the tree given, with
PYTHONHASHSEED=0; the log it wrote is read afterwards for events and bytes a job (the
`data` column's length, and the whole row: stream, type, delivery id, time and hash).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import apsw

from .common import command_line

# Keys are passed only when asked for: a base older than flow control has no such argument.
RUN = (
    "import pathlib, sys; from bench.lifecycle import run_rota; "
    "keys = [int(a) for a in sys.argv[3:]]; "
    "run_rota(pathlib.Path(sys.argv[1]), int(sys.argv[2]), 512, *keys)"
)
TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    instructions: int
    events: int
    data_bytes: int
    row_bytes: int


def measure(tree: Path, jobs: int, keys: int, key_limit: int, work: Path) -> Run:
    """One callgrind run of `run_rota` in `tree`; the log it wrote, counted."""
    python = tree / ".venv" / "bin" / "python"
    log = work / f"log-{jobs}.db"
    out = work / f"callgrind-{jobs}.out"
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        str(python),
        "-c",
        RUN,
        str(log),
        str(jobs),
        *([str(keys), str(key_limit)] if keys else []),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(command, check=False, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{tree}: the run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found = TOTALS.findall(out.read_bytes())
    if not found:
        raise SystemExit(f"no totals line in {out}: is valgrind's callgrind output readable?")
    connection = apsw.Connection(str(log), flags=apsw.SQLITE_OPEN_READONLY)
    events, data, row = connection.execute(
        "SELECT count(*), sum(length(data)), sum(length(data) + length(stream) + length(type)"
        " + coalesce(length(delivery_id), 0) + length(recorded_at) + length(hash) + 16)"
        " FROM events"
    ).fetchone()
    connection.close()
    return Run(int(found[-1]), events, data, row)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="another checkout, first")
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=2_000)
    parser.add_argument("--keys", type=int, default=0, help="[[keys]] rules (bench.lifecycle)")
    parser.add_argument("--key-limit", type=int, default=4)
    parser.add_argument("--keep", help="copy each callgrind output here (callgrind_annotate)")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    trees = [Path(t).resolve() for t in args.tree] + [here]
    span = args.large - args.small
    print(f"command: {command_line()}")
    print(
        f"callgrind, bench.lifecycle run_rota, concurrency 512, keys {args.keys}; a job = "
        f"(I({args.large}) - I({args.small})) / {span}"
    )
    print()
    print(
        "| tree | commit | I(small) | I(large) | instructions a job | events a job "
        "| data bytes a job | row bytes a job |"
    )
    print("|---|---|---|---|---|---|---|---|")
    first: float | None = None
    for tree in trees:
        commit = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        with tempfile.TemporaryDirectory(prefix="rota-instr-") as scratch:
            work = Path(scratch)
            small = measure(tree, args.small, args.keys, args.key_limit, work)
            large = measure(tree, args.large, args.keys, args.key_limit, work)
            if args.keep:
                kept = Path(args.keep)
                kept.mkdir(parents=True, exist_ok=True)
                for out in work.glob("callgrind-*.out"):
                    shutil.copy(out, kept / f"{tree.name}-{commit}-{out.name}")
        per_job = (large.instructions - small.instructions) / span
        first = per_job if first is None else first
        ratio = "" if first == per_job and tree == trees[0] else f" ({per_job / first:.3f}x)"
        print(
            f"| {tree} | {commit} | {small.instructions:,} | {large.instructions:,} "
            f"| {per_job:,.0f}{ratio} | {(large.events - small.events) / span:.2f} "
            f"| {(large.data_bytes - small.data_bytes) / span:,.0f} "
            f"| {(large.row_bytes - small.row_bytes) / span:,.0f} |"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
