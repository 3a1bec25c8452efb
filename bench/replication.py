"""What each replication setting costs rota's writes on PostgreSQL (issue 32, item 3).

    python -m bench.replication                  # 3 s per case, 2 rounds
    python -m bench.replication --seconds 1 --rounds 1

A primary and a streaming replica on this machine (`tests/failover/cluster.py`: `initdb`
into a temporary directory, never the shared server; `fsync=on` on both unless
`--no-fsync`), the settings applied on the primary (ALTER SYSTEM + reload), interleaved,
each round in the same order:
- `async, local flush`: `synchronous_standby_names = ''`, `synchronous_commit = on`: a
  commit waits for the primary's own WAL flush; a failover can lose what the replica had
  not received (rota then reports `log_regressed`);
- `async, no flush`: `synchronous_commit = off` (rota's `[store] synchronous = "normal"`):
  a server crash alone can lose the last commits;
- `sync, remote_write`: the replica has received and written (not flushed) each commit;
- `sync, on`: the replica has flushed it (PostgreSQL's default when synchronous);
- `sync, remote_apply`: the replica has applied it (a read there sees it).
Load: `1 thread` submitting one Work per `Scheduler.submit()` (the latency of one
acknowledged write), and `8 threads` doing the same (group-committed: the throughput).
Rates are Works acknowledged per second of wall time; the ratio is against `async, local
flush` of the same load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import rota
from bench.common import command_line, fmt_rate, print_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from failover.cluster import Cluster, cluster, missing

CASES: dict[str, tuple[str, str]] = {  # name: (synchronous_standby_names, synchronous_commit)
    "async, local flush": ("", "on"),
    "async, no flush": ("", "off"),
    "sync, remote_write": ("*", "remote_write"),
    "sync, on": ("*", "on"),
    "sync, remote_apply": ("*", "remote_apply"),
}
LOADS = {"1 thread": 1, "8 threads": 8}


def apply(pair: Cluster, names: str, commit: str) -> None:
    primary = pair.primary
    primary.set("synchronous_commit", commit)
    if names:
        pair.synchronous(True)
    else:
        pair.synchronous(False)


def run(scheduler: rota.Scheduler, threads: int, seconds: float, tag: str) -> float:
    """Works acknowledged per second, `threads` submitting for `seconds`."""
    counts = [0] * threads
    stop = threading.Event()

    def submitter(index: int) -> None:
        n = 0
        while not stop.is_set():
            scheduler.submit(f"{tag}-{index}-{n}", binding="b", input={"n": n})
            n += 1
        counts[index] = n

    workers = [threading.Thread(target=submitter, args=(i,)) for i in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    stop.wait(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    why = missing()
    if why is not None:
        print(f"cannot run: {why}", file=sys.stderr)
        return 1
    print(f"$ {command_line()}")
    rates: dict[tuple[str, str], list[float]] = {}
    with cluster(fsync=not args.no_fsync) as pair, tempfile.TemporaryDirectory() as home:
        url = f"postgresql://postgres@127.0.0.1:{pair.primary.port}/postgres?schema=bench"
        config = {
            "bindings": [{"name": "b", "executor": "shell", "command": ["true"]}],
            "audit": {"checkpoint_dir": str(Path(home) / "checkpoints")},
        }
        with rota.open(url, config=config, projections=False) as scheduler:
            for round_ in range(args.rounds):
                for name, (names, commit) in CASES.items():
                    apply(pair, names, commit)
                    for load, threads in LOADS.items():
                        tag = f"r{round_}-{name.replace(' ', '').replace(',', '')}-{threads}"
                        rate = run(scheduler, threads, args.seconds, tag)
                        rates.setdefault((name, load), []).append(rate)
                        print(f"  round {round_ + 1}: {name}, {load}: {fmt_rate(rate)}/s")
    rows = []
    for name in CASES:
        row = [name]
        for load in LOADS:
            median = statistics.median(rates[(name, load)])
            base = statistics.median(rates[("async, local flush", load)])
            every = " ".join(f"{r:.0f}" for r in rates[(name, load)])
            row.append(f"{fmt_rate(median)}/s ({median / base:.2f}x; {every})")
        rows.append(row)
    print(f"\nfsync {'off' if args.no_fsync else 'on'}; median of {args.rounds} rounds of "
          f"{args.seconds:g} s (every run in parentheses)")  # fmt: skip
    print_table(["setting", *LOADS], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
