"""Merkle proofs at scale: the stored tree's size, and the time to make and verify an
inclusion proof and a consistency proof, on an SQLite log of N events.

    python -m bench.proofs --events 1000000            # builds /tmp/rota-proofs-1000000.db once
    python -m bench.proofs --events 10000000 --samples 200

The log is built once (kept under /tmp for the next run) through `SQLiteStore.append`, in
appends of 10,000 events (a Work's submission and its inputs), synchronous NORMAL: the
tree is maintained by those appends as by any other. Then, on a reopened store: the count
and bytes of `merkle_nodes`; `tree_head()`; `--samples` inclusion proofs at random
positions against the head (`inclusion_path` through the store: SQLite reads and hashing,
then RFC 9162 verification of the path, timed apart), their path lengths; consistency
proofs between random sizes; and the upgrade of a store written before the tree (the
nodes dropped, then rebuilt by one scan, as a writer's first open does), timed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import apsw

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure import merkle
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.infrastructure.sqlite.tree import upgrade

BATCH = 10_000


def build(path: Path, events: int) -> None:
    started = time.perf_counter()
    with SQLiteStore(path, synchronous="normal") as store:
        count = store.head().position
        while count < events:
            work = f"w{count}"
            size = min(BATCH, events - count)
            batch = [
                NewEvent(f"work/{work}", WorkSubmitted(work_id=work, scope="root", binding="b"))
            ]
            batch += [
                NewEvent(f"work/{work}", InputAccepted(work_id=work, key=f"k{i}"))
                for i in range(size - 1)
            ]
            store.append(batch)
            count += size
    print(f"built {events:,} events in {time.perf_counter() - started:.0f} s: {path}")


def ms(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered) * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.proofs", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--path", default=None, help="the log (default /tmp/rota-proofs-N.db)")
    parser.add_argument("--no-upgrade", action="store_true", help="skip the upgrade timing")
    args = parser.parse_args(argv)
    path = Path(args.path or f"/tmp/rota-proofs-{args.events}.db")
    with SQLiteStore(path) as store:
        have = store.head().position
    if have < args.events:
        build(path, args.events)
    rng = random.Random(31)
    with SQLiteStore(path) as store:
        n = store.head().position
        nodes = store._query("SELECT count(*), sum(length(hash)) FROM merkle_nodes", ())[0]
        print(
            f"events {n:,}; stored nodes {nodes[0]:,} ({nodes[1] / 1024:,.0f} KiB of hashes, "
            f"{nodes[1] / n:.3f} bytes/event; n/128 = {n / 128:,.0f})"
        )
        started = time.perf_counter()
        head = store.tree_head()
        print(f"tree_head(): {(time.perf_counter() - started) * 1e3:.2f} ms")
        make, check, lengths = [], [], []
        for position in [rng.randint(1, n) for _ in range(args.samples)]:
            started = time.perf_counter()
            path_ = store.inclusion_path(position, n)
            made = time.perf_counter()
            leaf = merkle.leaf_hash(bytes.fromhex(store.read_raw(position - 1, 1)[0].hash))
            verified = time.perf_counter()
            assert merkle.verify_inclusion(position - 1, n, leaf, path_, head.root)
            check.append(time.perf_counter() - verified)
            make.append(made - started)
            lengths.append(len(path_))
        print(
            f"inclusion proof: path {min(lengths)}..{max(lengths)} hashes "
            f"({max(lengths) * 32} bytes; as rota-inclusion/1 JSON about "
            f"{max(lengths) * 67 + 600} bytes plus the envelope); make {ms(make)}; "
            f"verify {ms(check)}"
        )
        make, check, lengths = [], [], []
        for _ in range(max(args.samples // 5, 1)):
            old = rng.randint(1, n)
            started = time.perf_counter()
            proof = store.consistency_path(old, n)
            old_root = store.tree_head(old).root
            made = time.perf_counter()
            assert merkle.verify_consistency(old, n, old_root, head.root, proof)
            check.append(time.perf_counter() - made)
            make.append(made - started)
            lengths.append(len(proof))
        print(
            f"consistency proof: {min(lengths)}..{max(lengths)} hashes; make (with the old "
            f"root) {ms(make)}; verify {ms(check)}"
        )
    if not args.no_upgrade:
        conn = apsw.Connection(str(path))
        conn.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        upgrade(conn.cursor())
        spent = time.perf_counter() - started
        conn.execute("COMMIT")
        conn.close()
        print(
            f"upgrade of a store from before the tree (one scan, in a transaction): {spent:.1f} s"
        )
        with SQLiteStore(path) as store:
            assert store.tree_head() == head


if __name__ == "__main__":
    main()
