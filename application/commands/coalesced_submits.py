"""The submits that ask to coalesce (`debounce=`, `unique=`): the holder of their key is
read from the projection, `rota.domain.coalescing` decides, and the events are fenced.

Fences: opening a key appends `core.submit.key_taken` at the key stream's version (two
hosts opening one key: the second re-decides, and merges or is suppressed); a merge or a
suppression is appended at the holder's version (a holder that started or ended meanwhile
makes it re-decide). A repeated submit re-emits what it recorded under its delivery
identity, which the store returns as the original (nothing is written).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rota.domain import coalescing, lifecycle
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.state import WorkState
from rota.domain.submission import SubmitWork, WorkInput

if TYPE_CHECKING:
    from rota.application.commands.submissions import SubmissionCommands


def decide_coalesced(
    commands: SubmissionCommands, command: SubmitWork, now: datetime
) -> tuple[list[Emit], dict[str, int]]:
    """The events of a coalescing submit and the stream versions they are appended at."""
    command = coalescing.check(command)
    kind, key = coalescing.key_of(command)
    store, projection = commands.tx.store, commands.tx.projection
    keys: list[str | None] = [_key(given) for given in command.inputs] or [None]
    # A repeat of a merged or suppressed submit: what it recorded (the store's no-op).
    repeats = [store.find_delivery(coalescing.identity(command.work_id, k)) for k in keys]
    if all(found is not None for found in repeats):
        return [Emit(r.stream, r.event, r.delivery_id) for r in repeats if r is not None], {}
    holder_id = projection.flow.holders.get(f"{kind}/{key}")
    holder = projection.works.get(holder_id) if holder_id is not None else None
    exists = projection.works.get(command.work_id) is not None
    action = coalescing.decide(command, holder, exists)
    if action in ("merge", "suppress"):
        assert holder is not None
        emits = _onto_holder(commands, command, holder, keys, now, merge=action == "merge")
        return emits, ({work_stream(holder.work_id): holder.version} if emits else {})
    emits, fences = commands.submit_plain(command, now)
    if action == "open":
        emits = coalescing.opened(emits, command, now)
        stream = coalescing.key_stream(kind, key)
        fences = {**fences, stream: projection.flow.holder_versions.get(stream, 0)}
    return emits, fences


def _key(given: WorkInput) -> str:
    return given.key if given.key is not None else lifecycle.derived_input_key(given.payload)


def _onto_holder(
    commands: SubmissionCommands,
    command: SubmitWork,
    holder: WorkState,
    keys: list[str | None],
    now: datetime,
    *,
    merge: bool,
) -> list[Emit]:
    """Each input of the submit merged into the holder's window (the input accepted there,
    unless the window has that key already) or suppressed in its favour."""
    store = commands.tx.store
    emits: list[Emit] = []
    given: Sequence[WorkInput | None] = command.inputs or [None]
    for item, key in zip(given, keys, strict=True):
        identity = coalescing.identity(command.work_id, key)
        found = store.find_delivery(identity)
        if found is not None:  # this input's merge or suppression is recorded
            emits.append(Emit(found.stream, found.event, identity))
            continue
        if not merge:
            digest = None if item is None else lifecycle.derived_input_key(item.payload)
            emits.append(coalescing.suppressed(holder, command, key, digest))
            continue
        if item is not None and key is not None:
            has = any(p.key == key for p in holder.pending)
            has = has or store.find_delivery(f"input/{holder.work_id}/{key}") is not None
            if has and holder.work_id == command.work_id:
                continue  # a repeat of an input of its own window: a no-op
            if not has:
                emits.append(
                    lifecycle.accept_input(
                        holder,
                        work_id=holder.work_id,
                        payload=item.payload,
                        key=key,
                        correlation_key=item.correlation_key,
                    )
                )
        emits.append(coalescing.merged(holder, command, key, now))
    return emits


def one_per_key(commands: Sequence[SubmitWork]) -> None:
    """Refuse (`invalid_flow`) one transaction of submits that name a coalescing key twice:
    each is decided on the state before the transaction, so the second would not see the
    window or the holder the first makes (submit them one by one)."""
    seen: set[tuple[str, str]] = set()
    for command in commands:
        if command.debounce is None and command.unique is None:
            continue
        named = coalescing.key_of(command)
        if named in seen:
            raise InvalidCommand(
                f"two submits of one transaction ask for {named[0]} on key {named[1]!r}: "
                "submit them one by one (Scheduler.submit)",
                code=DomainCode.INVALID_FLOW,
            )
        seen.add(named)


__all__ = ["decide_coalesced", "one_per_key"]
