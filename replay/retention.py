"""Retention: plan and run the prune of old payloads, crash-safe and idempotent.

A policy (`RetentionPolicy`, from `[[retention]]`) covers the Works of a scope (the scope or
any under it) and/or a binding; a Work it covers is due once it is terminal and its last
event is older than `keep_days`. Each due Work's events lose their payloads: the payload
becomes the event's summary (`rota.infrastructure.retention_summary`); the rows themselves,
their hashes and so every proof stay. A Work is pruned by the first policy (in
configuration order) that covers it.

`run` prunes in this order, each step durable before the next:
1. resume: a recorded prune whose rewrite did not finish (a crash) is finished first;
2. a checkpoint of the head (signed when a key is given), into the checkpoint directory;
3. the archive: `prune-<tree size>-<store id>.jsonl` in the directory the operator names,
   `rota export`'s lines for the affected events, each with its inclusion proof (`path`)
   against that checkpoint, the checkpoint note in the header line; fsynced, then its
   SHA-256 taken;
4. `core.retention.pruned` appended (ranges, policy, archive name and digest, tree size and
   root: the checkpoint's);
5. the payloads rewritten in place in batches (`EventStore.rewrite_payloads`);
6. the file's freed pages given back a few at a time (`EventStore.storage(reclaim=...)`).
A crash before 4 leaves nothing pruned (an archive with no prune event is harmless and
is overwritten by the next run); a crash after 4 leaves a recorded prune that the next run
finishes (1). `fault`, for the crash tests, is called with each step's name.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path

import msgspec

from rota.application.ports import EventStore, NewEvent, RawRecord
from rota.domain.events import (
    PartialPrune,
    RetentionConfigured,
    RetentionPolicy,
    RetentionPruned,
)
from rota.infrastructure import merkle
from rota.infrastructure.atomic_file import atomic_write
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.codec import DEFAULT_CODEC, Codec
from rota.infrastructure.retention_summary import is_pruned, summary
from rota.replay.audit import iter_raw
from rota.replay.checkpoint import Checkpoint, Checkpointer
from rota.replay.export import export_line
from rota.replay.retention_audit import STREAM, Prune, prunes_of
from rota.replay.retention_plan import Plan, PolicyPlan, covers, plan

BATCH = 500
MAX_EVENTS = 50_000  # rows rewritten under one prune event (one archive file)
Group = tuple[str, PartialPrune | None, list[tuple[int, bytes, int]]]
VACUUM_STEP = 256  # pages given back per short write transaction
ARCHIVE_FORMAT = "rota-archive/1"


class PruneResult(msgspec.Struct, frozen=True):
    """What a run did: the prunes recorded (positions), rows rewritten, pages reclaimed."""

    prunes: list[int]
    events: int
    bytes_freed: int
    resumed: int
    reclaimed_pages: int
    archives: list[str]


def ranges(positions: Iterable[int]) -> list[list[int]]:
    """Sorted positions as inclusive `[first, last]` runs."""
    runs: list[list[int]] = []
    for p in sorted(positions):
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return runs


def _rows_in(store: EventStore, spans: list[list[int]]) -> Iterable[RawRecord]:
    for first, last in spans:
        after = first - 1
        while after < last:
            batch = store.read_raw(after, min(BATCH, last - after))
            if not batch:
                return
            yield from batch
            after = batch[-1].position


def resume(store: EventStore, codec: Codec = DEFAULT_CODEC) -> int:
    """Finish the rewrite of every recorded prune (rows still whole in its ranges)."""
    done = 0
    for prune in prunes_of(store):
        pending: list[tuple[int, bytes]] = []
        for row in _rows_in(store, prune.event.ranges):
            if is_pruned(row.data):
                continue
            new = summary(codec, row.type, row.type_version, row.data, row.position)
            if new is not None:
                pending.append((row.position, new))
        done += _rewrite(store, pending)
    return done


def _rewrite(
    store: EventStore, rows: list[tuple[int, bytes]], fault: Callable[[str], None] | None = None
) -> int:
    for i in range(0, len(rows), BATCH):
        store.rewrite_payloads(rows[i : i + BATCH])
        if fault is not None:
            fault("rewrite")
    return len(rows)


def write_archive(
    store: EventStore, directory: Path, checkpoint: Checkpoint, policy: str, positions: list[int]
) -> tuple[str, str]:
    """Write the archive of the events at `positions` (before their rewrite); return its
    file name and SHA-256 (hex). Each line is an export line plus `previous_hash` (the
    chain hash before it) and `path` (its RFC 9162 inclusion path against the checkpoint,
    hex, leaf first): with the header's checkpoint note, a whole `rota-inclusion/1` proof
    (`retention_archive.inclusion_proof`), checkable by `rota.verify` alone."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"prune-{checkpoint.position:012d}-{store.store_id}.jsonl"
    header = {
        "format": ARCHIVE_FORMAT,
        "store_id": store.store_id,
        "policy": policy,
        "tree_size": checkpoint.position,
        "root": checkpoint.root,
        "checkpoint": checkpoint.note(),
    }
    digest = hashlib.sha256()
    # One tree for every path: its memo keeps the subtrees neighbouring events share (a
    # path each through `store.inclusion_path` recomputed them: 0.85 ms an event).
    tree = merkle.Tree(_Source(store), checkpoint.position)
    with atomic_write(directory / name, mode=0o600, sync_directory=True) as out:

        def emit(line: bytes) -> None:
            out.write(line)
            digest.update(line)

        emit(msgspec.json.encode(header) + b"\n")
        last = (0, GENESIS_HEX)
        for row in _rows_in(store, ranges(positions)):
            if row.position - 1 != last[0]:
                (before,) = store.read_raw(row.position - 2, 1)
                last = (before.position, before.hash)
            path = tree.inclusion_path(row.position - 1)
            line = msgspec.to_builtins(export_line(row))
            line["previous_hash"] = last[1]
            line["path"] = [p.hex() for p in path]
            emit(msgspec.json.encode(line) + b"\n")
            last = (row.position, row.hash)
    return name, digest.hexdigest()


class _Source:
    """A store's rows and stored tree nodes, read through the port (`merkle.NodeSource`)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def leaves(self, start: int, end: int) -> list[str]:
        return [r.hash for r in self.store.read_raw(start, end - start)]

    def nodes(self, keys: Sequence[merkle.Key]) -> dict[merkle.Key, bytes]:
        found = {}
        for level, index in keys:
            got = self.store.tree_nodes(level, index - 1, 1)
            if got and got[0][0] == index:
                found[(level, index)] = got[0][1]
        return found


def run(
    store: EventStore,
    policies: Sequence[RetentionPolicy],
    now: datetime,
    archive_dir: str | os.PathLike[str],
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    key_path: str | os.PathLike[str] | None = None,
    codec: Codec = DEFAULT_CODEC,
    fault: Callable[[str], None] | None = None,
    reclaim_steps: int = 64,
    max_events: int = MAX_EVENTS,
) -> PruneResult:
    """Prune what is due now (see the module docstring for the order of steps): one prune
    per policy, or several when its Works hold more than `max_events` rows to rewrite (a
    Work is never split between prunes), each with its own checkpoint and archive."""
    record_policies(store, policies)
    resumed = resume(store, codec)
    todo = plan(store, policies, now, codec)
    recorded: list[int] = []
    archives: list[str] = []
    events = freed = 0
    directory = Path(archive_dir)
    for p in todo.policies:
        for chunk in _chunks(todo.groups.get(p.policy, []), max_events):
            rows = sorted(row for _, _, found in chunk for row in found)
            checkpointer = Checkpointer(
                store, checkpoint_dir or directory / "checkpoints", key_path=key_path
            )
            checkpoint = checkpointer.write()
            if fault is not None:
                fault("checkpoint")
            positions = [position for position, _, _ in rows]
            name, digest = write_archive(store, directory, checkpoint, p.policy, positions)
            if fault is not None:
                fault("archive")
            before = sum(size for _, _, size in rows)
            after = sum(len(new) for _, new, _ in rows)
            event = RetentionPruned(
                policy=p.policy,
                ranges=ranges(positions),
                tree_size=checkpoint.position,
                root=checkpoint.root or "",
                archive=name,
                archive_digest=digest,
                events=len(rows),
                bytes=before,
                summary_bytes=after,
                works=len(chunk),
                work_ids=sorted(work for work, part, _ in chunk if part is None),
                partial=[part for _, part, _ in chunk if part is not None],
            )
            appended = store.append(
                [NewEvent(STREAM, event, f"retention/pruned/{checkpoint.position}")]
            )
            recorded.append(appended.recorded[0].position)
            archives.append(name)
            if fault is not None:
                fault("recorded")
            events += _rewrite(store, [(position, new) for position, new, _ in rows], fault)
            freed += before - after
    reclaimed = reclaim(store, reclaim_steps) if recorded or resumed else 0
    return PruneResult(recorded, events, freed, resumed, reclaimed, archives)


def _chunks(groups: Sequence[Group], most: int) -> Iterable[list[Group]]:
    """Whole Works' shares, in log order, in chunks of at most `most` rows (a Work with
    more is a chunk of its own)."""
    chunk: list[Group] = []
    size = 0
    for group in groups:
        if chunk and size + len(group[2]) > most:
            yield chunk
            chunk, size = [], 0
        chunk.append(group)
        size += len(group[2])
    if chunk:
        yield chunk


def record_policies(store: EventStore, policies: Sequence[RetentionPolicy]) -> bool:
    """Append `core.retention.configured` when `policies` differ from the last recorded
    ones (none recorded counts as none in force); True when it did."""
    last: list[RetentionPolicy] = []
    for r in store.read_stream(STREAM):
        if isinstance(r.event, RetentionConfigured):
            last = list(r.event.policies)
    if last == list(policies):
        return False
    version = store.stream_version(STREAM)
    store.append(
        [NewEvent(STREAM, RetentionConfigured(policies=list(policies)))], {STREAM: version}
    )
    return True


class Status(msgspec.Struct, frozen=True):
    """What `rota retention show` says: the prunes recorded, the last one, and the log's
    payload bytes still whole (`retained`) and given up to prunes (`pruned`)."""

    prunes: int
    events_pruned: int
    bytes_retained: int
    bytes_pruned: int
    last_prune_position: int | None
    last_prune_at: str | None
    last_policy: str | None
    last_archive: str | None
    policies_recorded: list[RetentionPolicy]


def status(store: EventStore) -> Status:
    """The retention status of a log (reads every row's payload size once)."""
    recorded: list[RetentionPolicy] = []
    prunes = []
    for r in store.read_stream(STREAM):
        if isinstance(r.event, RetentionConfigured):
            recorded = list(r.event.policies)
        elif isinstance(r.event, RetentionPruned):
            prunes.append((r.position, r.recorded_at, r.event))
    retained = 0
    for row in iter_raw(store):
        if not is_pruned(row.data):
            retained += len(row.data.encode() if isinstance(row.data, str) else row.data)
    last = prunes[-1] if prunes else None
    return Status(
        prunes=len(prunes),
        events_pruned=sum(e.events for _, _, e in prunes),
        bytes_retained=retained,
        bytes_pruned=sum(e.bytes - e.summary_bytes for _, _, e in prunes),
        last_prune_position=last[0] if last else None,
        last_prune_at=last[1] if last else None,
        last_policy=last[2].policy if last else None,
        last_archive=last[2].archive if last else None,
        policies_recorded=recorded,
    )


def reclaim(store: EventStore, steps: int, pages: int = VACUUM_STEP) -> int:
    """Give back freed pages, `pages` per short write, at most `steps` writes; returns how
    many pages were given back (0 for a store with no file to shrink)."""
    space = store.storage()
    if space is None or space.vacuum != "incremental":
        return 0
    start = space.free
    for _ in range(steps):
        if space.free == 0:
            break
        space = store.storage(reclaim=pages)
        if space is None:
            break
    return start - (space.free if space is not None else start)


__all__ = [
    "Plan",
    "PolicyPlan",
    "Prune",
    "PruneResult",
    "covers",
    "plan",
    "ranges",
    "reclaim",
    "resume",
    "run",
]
