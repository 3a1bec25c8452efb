"""Append cost of keeping the Merkle tree: this tree's `bench.append` "rota" runner against a
base tree's (before the tree existed), in one interleaved run.

    python -m bench.append_tree --base /tmp/base-append        # 5,000 x 1 and 500 x 100
    python -m bench.append_tree --base /tmp/base-append --quick
    python -m bench.append_tree --base /tmp/base-append --dir /dev/shm --repeats 5   # CPU alone
    python -m bench.append_tree --base /tmp/base-append --store postgresql://postgres@127.0.0.1/test

Each tree runs in its own worker process (`<tree>/.venv/bin/python`, working directory the
tree, so each imports its own rota and `bench.append`), writing a fresh SQLite file with
synchronous FULL in the same temporary directory. Within a repeat the two take turns, slice
by slice (a tenth of the transactions each), in an order that alternates, so a slow patch of
the shared disk hits both alike. A repeat's rate is events over the sum of its slices' times;
the best of the repeats is reported, with every repeat's ratio. Goal (issue 31): the tree
within 1.1x of the base (ratio of rates >= 0.91).
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = """
import sys
from pathlib import Path
from bench.append import run_rota
from bench.workload import new_events
size, total, slices, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
runs = run_rota(Path(path), new_events(total), size, slices)
for _ in range(slices):
    sys.stdin.readline()
    print(next(runs), flush=True)
for _ in runs:
    raise AssertionError("more slices than asked")
"""
WORKER_PG = """
import sys, time
import psycopg
from bench.append import as_submit_expects, split
from bench.workload import batches, new_events
from rota.infrastructure.postgres.store import PostgresStore
size, total, slices, url = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
groups = batches(new_events(total), size)
work = [(g, as_submit_expects(g[0]) if size == 1 else {}) for g in groups]
store = PostgresStore(url)
for part in split(work, slices):
    sys.stdin.readline()
    start = time.perf_counter()
    for group, expected in part:
        store.append(group, expected)
    print(time.perf_counter() - start, flush=True)
assert store.head().position == total
store.close()
server, schema = url.split("?schema=")
with psycopg.connect(server, autocommit=True) as conn:
    conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
"""


def repeat(
    trees: dict[str, Path],
    directory: Path,
    size: int,
    total: int,
    slices: int,
    tag: str,
    server: str | None = None,
) -> dict[str, float]:
    """One repeat: both trees' workers, slice by slice; the seconds each took. With
    `server` (a PostgreSQL URL), each writes a fresh schema of its own there."""
    target = {
        name: str(directory / f"{name}-{tag}.db")
        if server is None
        else f"{server}?schema=rota_bench_{name}_{secrets.token_hex(4)}"
        for name in trees
    }
    workers = {
        name: subprocess.Popen(
            [
                str(tree / ".venv" / "bin" / "python"),
                "-c",
                WORKER if server is None else WORKER_PG,
                str(size),
                str(total),
                str(slices),
                target[name],
            ],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, tree in trees.items()
    }
    seconds = dict.fromkeys(trees, 0.0)
    names = list(trees)
    for turn in range(slices):
        for name in names[turn % 2 :] + names[: turn % 2]:
            worker = workers[name]
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("\n")
            worker.stdin.flush()
            seconds[name] += float(worker.stdout.readline())
    for worker in workers.values():
        assert worker.stdin is not None
        worker.stdin.close()
        if worker.wait() != 0:
            raise SystemExit("a worker failed")
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.append_tree", description=__doc__)
    parser.add_argument("--base", required=True, help="a checkout of the base, with its .venv")
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slices", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--store", default=None, help="a PostgreSQL server URL (no schema): append there instead"
    )
    parser.add_argument(
        "--dir", default=None, help="where the files go (/dev/shm: no disk, the CPU cost alone)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.batches = 500, 50
    trees = {"base": Path(args.base).resolve(), "tree": ROOT}
    cases = [
        (f"1 event/txn ({args.events:,})", 1, args.events),
        (f"100 events/txn ({args.batches:,})", 100, args.batches * 100),
    ]
    print(f"append with the Merkle tree (tree) against the base ({trees['base']}), events/s")
    with tempfile.TemporaryDirectory(prefix="rota-bench-", dir=args.dir) as tmp:
        for case, size, total in cases:
            rates: dict[str, list[float]] = {name: [] for name in trees}
            ratios = []
            for rep in range(args.repeats):
                spent = repeat(
                    trees, Path(tmp), size, total, args.slices, f"{size}-{rep}", args.store
                )
                for name in trees:
                    rates[name].append(total / spent[name])
                ratios.append(rates["tree"][-1] / rates["base"][-1])
                print(
                    f"  {case} rep {rep + 1}: base {rates['base'][-1]:,.0f}, tree "
                    f"{rates['tree'][-1]:,.0f}, tree/base {ratios[-1]:.3f}",
                    flush=True,
                )
            best = max(rates["tree"]) / max(rates["base"])
            verdict = "met" if best >= 1 / 1.1 else "MISSED"
            print(
                f"{case}: best base {max(rates['base']):,.0f}, best tree "
                f"{max(rates['tree']):,.0f}, tree/base {best:.3f} (goal >= 0.909: {verdict}); "
                f"per run {' / '.join(f'{r:.3f}' for r in ratios)}",
                flush=True,
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
