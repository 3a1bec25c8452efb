"""Peak RSS, wall and CPU time of `rota doctor --json`, `rota replay verify` and `rota audit
verify` on the `bench.memory` stores, this tree against a base tree, runs interleaved.

    python -m bench.check_memory --base /work/wt-base               # 10k and 1M quiet Works
    python -m bench.check_memory --base /work/wt-base --quiet 10000 --pairs 3 --cap-gib 4
    python -m bench.check_memory --base /work/base33 --quiet 200000 --pairs 2   # issue 33

The stores are `bench.memory`'s (`bench.bulk_log`: `--quiet` completed Works and 1,000
running ones, projections rebuilt once), built or reused under `--cache`. Each command runs
in a fresh process under `bench.memory`'s LAUNCHER, whose `ru_maxrss` is that of the
command's process and of the children it waited for (a forked fold's: the larger of
the two, not their sum), and its CPU seconds (user + system, those children's included),
with each tree's own interpreter (`<tree>/.venv/bin/python`) and
working directory. Pairs alternate which tree goes first. `--cap-gib` runs every command
under `prlimit --as` (an address-space cap: a command that needs more fails with
MemoryError, recorded as such), so a base that grows with the store is stopped there.
Target (issue 18): on the largest store, within 1.5x of the smallest store's RSS. Issue 33
(one read of the log for every fold): each command's CPU and wall time, new / base, summed
over the pairs on each store.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .bulk_log import cached
from .common import command_line, progress
from .memory import LAUNCHER, TARGET, with_projections

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "doctor --json": ("doctor", "--json"),
    "replay verify": ("replay", "verify"),
    "audit verify": ("audit", "verify"),
}


def run(
    tree: Path, store: Path, args: Sequence[str], cap_gib: float | None
) -> tuple[str, float, float]:
    """One command in `tree` on `store`: (its peak RSS in MiB, or why it failed; wall s;
    CPU s)."""
    python = tree / ".venv" / "bin" / "python"
    command = [str(python), "-P", "-m", "rota", "--store", str(store), *args]
    launcher = [sys.executable, "-S", "-c", LAUNCHER, *command]
    if cap_gib is not None:
        launcher = ["prlimit", f"--as={int(cap_gib * 2**30)}", *launcher]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = subprocess.call(launcher, cwd=tree, stdout=out, stderr=err)
        wall = time.perf_counter() - started
        err.seek(0)
        lines = err.read().decode(errors="replace").splitlines()
    rss = next((line for line in reversed(lines) if line.startswith("maxrss-kib ")), None)
    mib = int(rss.split()[1]) / 1024 if rss else float("nan")
    used = next((line for line in reversed(lines) if line.startswith("cpu-seconds ")), None)
    cpu = float(used.split()[1]) if used else float("nan")
    if code != 0:
        why = next((line for line in reversed(lines) if "Error" in line), f"exit code {code}")
        return f"failed at {mib:.0f} MiB ({why.strip()[:60]})", wall, cpu
    return f"{mib:.0f} MiB", wall, cpu


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the base tree (its .venv)")
    parser.add_argument("--quiet", type=int, action="append", help="quiet Works (repeatable)")
    parser.add_argument("--active", type=int, default=1_000)
    parser.add_argument("--cache", default="/tmp/rota-bench-logs")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--cap-gib", type=float, default=None)
    parser.add_argument(
        "--base-quiet-max", type=int, default=None, help="skip base on larger stores"
    )
    args = parser.parse_args(argv)
    sizes = args.quiet or [10_000, 1_000_000]
    trees = {"new": ROOT, "base": args.base.resolve()}
    print(f"command: {command_line()}")
    print(f"load at start: {os.getloadavg()[0]:.1f}; cap: {args.cap_gib or 'none'} GiB")
    print()
    print("peak RSS, wall, CPU (user + system) of each command")
    print()
    print("| quiet Works | pair | tree | " + " | ".join(f"`{c}`" for c in COMMANDS) + " | load |")
    print("|---|---|---|" + "---|" * len(COMMANDS) + "---|")
    figures: dict[tuple[int, str, str], list[float]] = {}
    times: dict[tuple[int, str, str], list[tuple[float, float]]] = {}
    for quiet in sizes:
        path = Path(args.cache) / f"scale-{quiet}-{args.active}-0.db"
        progress(f"building (or reusing) {path} ...")
        cached(path, quiet, args.active)
        with_projections(path)
        for pair in range(args.pairs):
            order = ["new", "base"] if pair % 2 == 0 else ["base", "new"]
            for name in order:
                if name == "base" and args.base_quiet_max and quiet > args.base_quiet_max:
                    continue
                cells = []
                for label, command in COMMANDS.items():
                    progress(f"{quiet:,} pair {pair + 1} {name}: {label} ...")
                    rss, wall, cpu = run(trees[name], path, command, args.cap_gib)
                    cells.append(f"{rss}, {wall:.1f} s, {cpu:.1f} s CPU")
                    times.setdefault((quiet, name, label), []).append((wall, cpu))
                    if rss.endswith(" MiB"):
                        figures.setdefault((quiet, name, label), []).append(float(rss[:-4]))
                print(
                    f"| {quiet:,} | {pair + 1} | {name} | {' | '.join(cells)} "
                    f"| {os.getloadavg()[0]:.1f} |",
                    flush=True,
                )
    print()
    for quiet in sizes:
        for label in COMMANDS:
            new, base = times.get((quiet, "new", label)), times.get((quiet, "base", label))
            if not new or not base:
                continue
            wall = sum(w for w, _ in new) / sum(w for w, _ in base)
            cpu = sum(c for _, c in new) / sum(c for _, c in base)
            print(f"{quiet:,} quiet Works, {label}: new / base wall {wall:.2f}x, CPU {cpu:.2f}x")
    small, large = sizes[0], sizes[-1]
    for label in COMMANDS:
        for name in trees:
            a, b = figures.get((small, name, label)), figures.get((large, name, label))
            if not a or not b:
                print(f"{name} {label}: no ratio (did not finish on both stores)")
                continue
            ratio = max(b) / max(a)
            verdict = "MET" if ratio <= TARGET else "MISSED"
            print(
                f"{name} {label}: {ratio:.2f}x the smallest store's peak RSS "
                f"(target <= {TARGET}x): {verdict}"
            )


if __name__ == "__main__":
    main()
