"""Audit: prove the log was not altered, reordered, cut in the middle, or cut at the end.

`verify_chain` walks the log in position order and checks, for every row:
- positions run 1, 2, 3 ... with no gap (a deleted row shows as the missing position);
- the stored hash equals SHA-256(previous hash || canonical envelope) (an edited column,
  an inserted row, or rows swapped show at the first position whose link breaks);
- each stream's versions run 1, 2, 3 ... in position order.
It returns a `ChainReport` naming the first bad position and why; it never raises for a bad
log (only for an unreadable store). Truncation of the tail is invisible to the chain
alone; only a checkpoint (position, hash) kept outside the store reveals it: give
`verify_chain` the checkpoints and it also proves the log still extends each of them
(`verify_extends` does that one checkpoint at a time, without walking the chain).

For a store, the walk also recomputes the Merkle tree's stored nodes from the rows and
compares them (`tree_check`): a node that disagrees, is missing or lies beyond the head
fails the report (`tree_ok` False, `tree_reason` naming the positions it covers), though
the rows chain: proofs built on it would be wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import msgspec

from rota.application.errors import PortCode, StoreError
from rota.application.ports import EventStore, RawRecord
from rota.infrastructure.chain import GENESIS_HEX, link_row
from rota.infrastructure.merkle import Builder
from rota.infrastructure.retention_summary import is_pruned
from rota.replay.checkpoint import Checkpoint
from rota.replay.errors import ReplayCode
from rota.replay.progress import ProgressFactory, silent
from rota.replay.retention_audit import Prune, PruneCheck, prunes_of
from rota.replay.tree_check import TreeCheck

Checkpoints = Checkpoint | Iterable[Checkpoint] | None


class ChainReport(msgspec.Struct, frozen=True):
    """The verdict on a log: `ok`, how many rows were checked, and the first problem.

    With checkpoints: `checkpoints` compared, `checkpoint_ok` (None when none was compared)
    and `checkpoint_position` / `checkpoint_reason` for the first that failed, else the
    highest that matched. `from_position` is where a partial export starts (0: position 1).
    `tree_ok` is the verdict on the store's stored Merkle nodes (None: not judged, as for
    an export), `tree_reason` and `tree_first`..`tree_last` the first bad node's positions.
    """

    ok: bool
    checked: int
    head_position: int
    head_hash: str
    first_bad_position: int | None = None
    reason: str | None = None
    from_position: int = 0
    checkpoints: int = 0
    checkpoint_ok: bool | None = None
    checkpoint_position: int | None = None
    checkpoint_reason: str | None = None
    tree_ok: bool | None = None
    tree_reason: str | None = None
    tree_first: int | None = None
    tree_last: int | None = None
    pruned: int = 0
    prunes: int = 0
    pruned_summary: str | None = None


def iter_raw(store: EventStore, page: int = 5000, after: int = 0) -> Iterator[RawRecord]:
    """Every stored row after `after`, in position order, read in pages."""
    position = after
    while True:
        batch = store.read_raw(position, page)
        if not batch:
            return
        yield from batch
        position = batch[-1].position


def verify_records(
    records: Iterable[RawRecord],
    *,
    progress: Callable[[int], None] | None = None,
    after: int = 0,
    previous_hash: str = GENESIS_HEX,
    checkpoint: Checkpoints = None,
    store_id: str | None = None,
    tree: TreeCheck | None = None,
    prunes: list[Prune] | None = None,
) -> ChainReport:
    """Verify rows that start at position `after + 1`, chained to `previous_hash`.

    `after` > 0 verifies a part of a log (an export `--from N`): a stream's first version in
    that part cannot be checked against the rows before it, only its continuity after.
    Checkpoints are compared with the rows (their `store_id` with `store_id`, if given).
    `prunes` are the log's recorded prunes: a pruned row is judged by them
    (`retention_audit`), not by its link.
    """
    pruning = PruneCheck(prunes or [], roots=not after)
    wanted = _normalize(checkpoint)
    watch = {c.position for c in wanted}
    seen: dict[int, str] = {after: previous_hash}
    # The Merkle roots at the checkpoints' sizes, from the rows (only a whole log has them).
    rooted = Builder() if not after and any(c.root for c in wanted) else None
    if rooted is not None and tree is not None:
        rooted = tree.builder  # (the tree check feeds it every row already)
    roots: dict[int, str] = {0: Builder().root().hex()} if rooted else {}
    previous = bytes.fromhex(previous_hash)
    expected_position = after + 1
    stream_versions: dict[str, int] = {}
    checked = 0
    report: ChainReport | None = None
    for record in records:
        if record.position != expected_position:
            if record.position > expected_position:
                why = f"position {expected_position} is missing (next row is {record.position})"
            else:
                why = (
                    f"position {record.position} appears out of order after {expected_position - 1}"
                )
            report = _bad(checked, expected_position - 1, previous, expected_position, why)
            break
        pruned = is_pruned(record.data)
        why_pruned = pruning.pruned_row(record.position) if pruned else None
        if why_pruned is not None:
            report = _bad(checked, record.position - 1, previous, record.position, why_pruned)
            break
        computed = bytes.fromhex(record.hash) if pruned else link_row(previous, record)
        if computed.hex() != record.hash:
            report = _bad(
                checked,
                record.position - 1,
                previous,
                record.position,
                "stored hash does not match the row's content and the previous hash "
                "(the row was edited, inserted, or moved)",
            )
            break
        last = stream_versions.get(record.stream)
        first_allowed = (0, 1) if record.type_version == 0 else (1,)
        if last is None and after and record.version >= 1:
            first_allowed = (record.version,)  # a partial log: its past is not here
        if (last is None and record.version not in first_allowed) or (
            last is not None and record.version != last + 1
        ):
            want = "1" if last is None else str(last + 1)
            report = _bad(
                checked,
                record.position - 1,
                previous,
                record.position,
                f"stream {record.stream!r} jumps to version {record.version}, expected {want}",
            )
            break
        stream_versions[record.stream] = record.version
        why_root = pruning.add(record.position, record.hash)
        if why_root is not None:
            report = _bad(checked, record.position - 1, previous, record.position, why_root)
            break
        if tree is not None:
            tree.add(record.hash)
        elif rooted is not None:
            rooted.add_hex(record.hash)
        previous = computed
        if record.position in watch:
            seen[record.position] = record.hash
            if rooted is not None:
                roots[record.position] = rooted.root().hex()
        expected_position += 1
        checked += 1
        if progress is not None and checked % 10_000 == 0:
            progress(checked)
    if report is None:
        report = ChainReport(True, checked, expected_position - 1, previous.hex())
    report = msgspec.structs.replace(
        report,
        from_position=after,
        pruned=pruning.pruned,
        prunes=len(pruning.prunes),
        pruned_summary=pruning.summary(),
    )
    if wanted:
        report = judge(report, wanted, seen, store_id, roots)
    return report if tree is None else _judge_tree(report, tree)


def verify_chain(
    store: EventStore,
    *,
    progress: Callable[[int], None] | None = None,
    checkpoint: Checkpoints = None,
) -> ChainReport:
    """Verify the whole log of a store, and that it extends the checkpoint(s) if given."""
    wanted = _normalize(checkpoint)
    store_id = store.store_id if wanted else None
    return verify_records(
        iter_raw(store),
        progress=progress,
        checkpoint=wanted,
        store_id=store_id,
        tree=TreeCheck(store),
        prunes=prunes_of(store),
    )


def _judge_tree(report: ChainReport, tree: TreeCheck) -> ChainReport:
    if report.first_bad_position is None:
        tree.finish()
    if tree.ok is not False:
        return msgspec.structs.replace(report, tree_ok=tree.ok)
    judged = msgspec.structs.replace(
        report,
        tree_ok=False,
        tree_reason=tree.reason,
        tree_first=tree.first,
        tree_last=tree.last,
    )
    if not report.ok:
        return judged  # the chain's own first problem stays the report's
    return msgspec.structs.replace(judged, ok=False, reason=tree.reason)


# -- checkpoints ---------------------------------------------------------------------------


def _normalize(checkpoint: Checkpoints) -> list[Checkpoint]:
    if checkpoint is None:
        return []
    if isinstance(checkpoint, Checkpoint):
        return [checkpoint]
    return sorted(checkpoint, key=lambda c: c.position)


def _compare(
    checkpoint: Checkpoint,
    store_id: str | None,
    head: int,
    stored_hash: str | None,
    root: str | None = None,
) -> tuple[ReplayCode, str] | None:
    """Why a log (its id, head position, stored hash and Merkle root (hex, None: not known)
    at the checkpoint) does not extend it."""
    when = f"checkpoint at position {checkpoint.position} (written {checkpoint.written_at})"
    if store_id is not None and checkpoint.store_id != store_id:
        return (
            ReplayCode.CHECKPOINT_OTHER_STORE,
            f"{when} is of store {checkpoint.store_id}, this log is store {store_id}: "
            "a different store",
        )
    if head < checkpoint.position:
        return (
            ReplayCode.LOG_BEHIND_CHECKPOINT,
            f"the log ends at position {head} but the {when} saw position "
            f"{checkpoint.position}: positions {head + 1}..{checkpoint.position} were "
            "truncated or lost",
        )
    if stored_hash != checkpoint.head_hash:
        return (
            ReplayCode.LOG_REWRITTEN,
            f"the stored hash at position {checkpoint.position} is not the {when}'s: the log "
            f"up to position {checkpoint.position} was rewritten and re-chained",
        )
    if checkpoint.root is not None and root is not None and root != checkpoint.root:
        return (
            ReplayCode.TREE_ROOT_MISMATCH,
            f"the log's Merkle root at size {checkpoint.position} is not the {when}'s: "
            "the rows up to it or the store's tree were altered",
        )
    return None


def check_extends(
    store_or_records: EventStore | Iterable[RawRecord],
    checkpoint: Checkpoint,
    *,
    store_id: str | None = None,
) -> tuple[ReplayCode, str] | None:
    """`(code, reason)` when the log does not extend the checkpoint, else None.

    For a store, reads only its id, head and the row at the checkpoint's position. For
    records (a log from position 1, e.g. an export), `store_id` is compared if given.
    """
    position = checkpoint.position
    if isinstance(store_or_records, EventStore):
        store = store_or_records
        head = store.head().position
        if position == 0:
            stored: str | None = GENESIS_HEX
        else:
            rows = store.read_raw(position - 1, 1) if head >= position else []
            stored = rows[0].hash if rows and rows[0].position == position else None
        root = None
        if checkpoint.root is not None and stored == checkpoint.head_hash:
            try:
                root = store.tree_head(position).root.hex()
            except StoreError as exc:  # a damaged tree: no root to compare is a mismatch
                if exc.code != PortCode.TREE_NODE_MISSING:
                    raise
                return ReplayCode.TREE_ROOT_MISMATCH, f"no Merkle root at size {position}: {exc}"
        return _compare(checkpoint, store.store_id, head, stored, root)
    head, stored = 0, GENESIS_HEX if position == 0 else None
    builder = Builder()
    root = builder.root().hex() if position == 0 else None
    for record in store_or_records:
        head = record.position
        if head <= position and checkpoint.root is not None:
            builder.add_hex(record.hash)
        if head == position:
            stored = record.hash
            root = builder.root().hex() if checkpoint.root is not None else None
    return _compare(checkpoint, store_id, head, stored, root)


def verify_extends(
    store_or_records: EventStore | Iterable[RawRecord],
    checkpoint: Checkpoint,
    *,
    store_id: str | None = None,
) -> str | None:
    """Why the log does not extend the checkpoint (truncated, rewritten, another store)."""
    verdict = check_extends(store_or_records, checkpoint, store_id=store_id)
    return None if verdict is None else verdict[1]


def judge(
    report: ChainReport,
    checkpoints: list[Checkpoint],
    seen: dict[int, str],
    store_id: str | None,
    roots: dict[int, str] | None = None,
) -> ChainReport:
    """Add the checkpoint verdict to a chain report (`seen`: stored hashes by position;
    `roots`: the Merkle roots the rows give at those sizes, when known)."""
    compared = 0
    matched: Checkpoint | None = None
    for checkpoint in checkpoints:
        position = checkpoint.position
        if position < report.from_position:
            continue  # before a partial export: nothing to compare with
        if not report.ok and position >= (report.first_bad_position or 0):
            break  # past the break: the chain already failed
        stored = GENESIS_HEX if position == 0 else seen.get(position)
        root = (roots or {}).get(position)
        verdict = _compare(checkpoint, store_id, report.head_position, stored, root)
        compared += 1
        if verdict is None:
            matched = checkpoint
            continue
        reason = verdict[1]
        if verdict[0] == ReplayCode.LOG_REWRITTEN and matched is not None:
            reason += f" (the checkpoint at position {matched.position} still matches)"
        failed = msgspec.structs.replace(
            report,
            checkpoints=compared,
            checkpoint_ok=False,
            checkpoint_position=position,
            checkpoint_reason=reason,
        )
        if not report.ok:
            return failed  # the chain's own first problem stays the report's
        bad = None
        if verdict[0] == ReplayCode.LOG_BEHIND_CHECKPOINT:
            bad = report.head_position + 1
        elif verdict[0] in (ReplayCode.LOG_REWRITTEN, ReplayCode.TREE_ROOT_MISMATCH):
            bad = position
        return msgspec.structs.replace(failed, ok=False, first_bad_position=bad, reason=reason)
    return msgspec.structs.replace(
        report,
        checkpoints=compared,
        checkpoint_ok=True if compared else None,
        checkpoint_position=matched.position if matched else None,
    )


def _bad(checked: int, head: int, previous: bytes, position: int, reason: str) -> ChainReport:
    return ChainReport(False, checked, head, previous.hex(), position, reason)


def verify_chain_with(
    store: EventStore, progress: ProgressFactory = silent, *, checkpoint: Checkpoints = None
) -> ChainReport:
    """`verify_chain` (with the checkpoints, if given) and a progress bar over the log."""
    with progress(store.head().position, "verify") as bar:
        report = verify_chain(
            store,
            progress=lambda checked: bar.advance(checked - bar.done),
            checkpoint=checkpoint,
        )
        bar.advance(report.checked - bar.done)  # (the chain reports every 10,000 events)
        return report


__all__ = [
    "ChainReport",
    "check_extends",
    "iter_raw",
    "judge",
    "verify_chain",
    "verify_chain_with",
    "verify_extends",
    "verify_records",
]
