"""Submission commands: define Work and accept its input (one, a batch, many), and the
bindings a daemon serves (`core.binding.served`). `LifecycleCommands` is built on them.

Each command reads the projection, calls a pure decision of `rota.domain` and appends
through the transaction loop (`rota.application.transactions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from rota.application.collection import fewer_collections
from rota.application.commands.coalesced_submits import decide_coalesced, one_per_key
from rota.application.configuration import Configuration
from rota.application.errors import DeliveryConflict, PortCode
from rota.application.ports import AppendResult, RecordedEvent
from rota.application.transactions import Transactions
from rota.domain import lifecycle
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, Refusal, RotaError
from rota.domain.events import BindingServed, InputAccepted
from rota.domain.events.work import accepted_input, input_identity
from rota.domain.events.work import binding_served_identity as identity
from rota.domain.submission import SubmitWork
from rota.projections.held_works import OnDemandWorks


def result_start(result: AppendResult) -> int:
    """The log head before `result`'s append: its new events follow it directly."""
    if not result.written:
        return max((r.position for r in result.recorded), default=0)
    newest = max(r.position for r in result.recorded)
    return newest - result.written


def unsealed_personal(work_id: str, paths: tuple[str, ...]) -> RotaError:
    """`personal_unsealed`: an input still marked personal reached the writer unsealed (a
    submit path that does not seal); refused, never written in the clear."""
    return RotaError(
        f"an input of Work {work_id!r} marks personal fields {list(paths)} that were not "
        "sealed before the append (submit through Scheduler.submit, the CLI or the HTTP API)",
        code=PortCode.PERSONAL_UNSEALED,
    )


class SubmissionCommands:
    """Work and input over one transaction loop and configuration."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config

    # -- Work and input ----------------------------------------------------------------

    def submit(self, command: SubmitWork) -> AppendResult:
        """Define a Work (idempotently) and accept the command's inputs."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            return self._submit_one(command, self.tx.now())

        return self.tx.transact(decide)

    def _submit_one(self, command: SubmitWork, now: datetime) -> tuple[list[Emit], dict[str, int]]:
        if command.debounce is not None or command.unique is not None:
            return decide_coalesced(self, command, now)
        return self.submit_plain(command, now)

    def submit_plain(self, command: SubmitWork, now: datetime) -> tuple[list[Emit], dict[str, int]]:
        """A submit's events (its definition if new, its inputs) and the fences they need."""
        work_id = command.work_id
        existing = self.tx.projection.works.get(work_id)
        emits = lifecycle.submit(existing, command)
        unknown = self.config.unknown_grants(command.grants) if command.grants else None
        if unknown and emits:  # (a Work already defined with them is a no-op, not refused)
            raise Refusal(
                f"Work {work_id!r} opts into grant {unknown[0]!r}, which is not configured: "
                f"define it under [[grants]] (or Scheduler.grant); defined: "
                f"{sorted(self.config.grants) or 'none'}",
                code=PortCode.UNKNOWN_GRANT,
            )
        state = existing if existing is not None else lifecycle.new_work(command, now)
        for given in command.inputs:
            if given.personal:
                raise unsealed_personal(work_id, given.personal)
            try:
                emit = lifecycle.accept_input(
                    state,
                    work_id=work_id,
                    payload=given.payload,
                    key=given.key,
                    correlation_key=given.correlation_key,
                )
            except Refusal as refusal:
                # A caller retrying a submit whose input was accepted (and maybe already run)
                # gets a no-op, not an error: the input's delivery identity is in the log.
                if refusal.code == DomainCode.WORK_TERMINAL and self._accepted(
                    work_id, given.payload, given.key, given.correlation_key
                ):
                    continue
                raise
            emits.append(emit)
        # Input for an existing Work is decided on its state (terminal or not): appended
        # at the version read, so a cancel another host recorded meanwhile re-decides it
        # (found by the simulator, issue 29: input was accepted after a cancel).
        if existing is None:
            # A new Work's definition carries its first input (one event less).
            return lifecycle.carry_first_input(emits), {work_stream(work_id): 0}
        return emits, ({work_stream(work_id): existing.version} if emits else {})

    def _accepted(
        self, work_id: str, payload: Any, key: str | None, correlation_key: str | None
    ) -> bool:
        """Whether this very input is recorded; the key recorded with another input is a
        `DeliveryConflict`, as the store's rule says (a key names one input)."""
        key = key if key is not None else lifecycle.derived_input_key(payload)
        identity = input_identity(work_id, key)
        recorded = self.tx.store.find_delivery(identity)
        if recorded is None:
            return False
        given = InputAccepted(
            work_id=work_id, key=key, payload=payload, correlation_key=correlation_key
        )
        # (the input a Work's definition carries, as the separate input it stands for)
        found = accepted_input(recorded.event)
        if msgspec.to_builtins(found) != msgspec.to_builtins(given):
            raise DeliveryConflict(identity, recorded.position)
        return True

    def record_served(self, bindings: Sequence[str]) -> int:
        """Record `core.binding.served` for each of `bindings` the log has not recorded yet
        (once per name, ever: its delivery identity); returns how many were recorded.

        Schedulers starting together race to record the same name, each with its own
        owner: the loser's append is a `DeliveryConflict` on the identity the winner
        recorded, which is what this wants recorded, so it asks again for the names still
        missing (each round one name at least is recorded by someone, so it ends)."""
        owner = self.config.owner
        for _ in range(len(set(bindings)) + 1):
            new = [name for name in sorted(set(bindings)) if not self.served(name)]
            if not new:
                return 0

            def decide(new: list[str] = new) -> tuple[list[Emit], dict[str, int]]:
                return [
                    Emit(
                        f"binding/{name}", BindingServed(binding=name, owner=owner), identity(name)
                    )
                    for name in new
                ], {}

            try:
                return self.tx.transact(decide).written
            except DeliveryConflict as conflict:
                if not conflict.delivery_id.startswith("binding/"):
                    raise
        return 0

    def served(self, binding: str) -> bool:
        """Whether some scheduler serving this store has recorded that it runs `binding`."""
        return self.tx.store.find_delivery(identity(binding)) is not None

    def submit_batch(
        self, commands: Sequence[SubmitWork], *, atomic: bool = False
    ) -> list[AppendResult | RotaError]:
        """Submit several Works (each a `submit` command) in one append.

        Returns, per command in order, what it recorded or the refusal it got. Not
        `atomic`: a refused command is left out and the others are appended (a group
        commit of independent callers); `atomic`: the first refusal is raised and nothing
        is appended. A command whose Work an earlier command of the batch also submits is
        decided on the state before the batch, so callers give each Work at most once,
        and each coalescing key (debounce, unique) at most once (`invalid_flow`).
        """
        slices: list[tuple[int, int] | RotaError] = []
        one_per_key(commands)

        def decide() -> tuple[list[Emit], dict[str, int]]:
            slices.clear()
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            now = self.tx.now()
            self._prefetch([command.work_id for command in commands])
            for command in commands:
                try:
                    more, fences = self._submit_one(command, now)
                except RotaError as refusal:
                    if atomic:
                        raise
                    slices.append(refusal)
                    continue
                slices.append((len(emits), len(emits) + len(more)))
                emits.extend(more)
                expected.update(fences)
            return emits, expected

        result = self.tx.transact(decide)
        start = result_start(result)  # positions past it are this append's writes
        out: list[AppendResult | RotaError] = []
        for item in slices:
            if isinstance(item, RotaError):
                out.append(item)
                continue
            recorded = result.recorded[item[0] : item[1]]
            out.append(AppendResult(recorded, sum(1 for r in recorded if r.position > start)))
        return out

    def _prefetch(self, work_ids: list[str]) -> None:
        """Find the Works a batch names in one log read, not one per Work (when the held
        Works are looked up on demand)."""
        held = self.tx.projection.works
        if isinstance(held, OnDemandWorks):
            held.prefetch(work_ids)

    def submit_many(self, commands: Sequence[SubmitWork]) -> AppendResult:
        """Submit several Works in one append, all or nothing (bulk loading)."""
        one_per_key(commands)

        def decide() -> tuple[list[Emit], dict[str, int]]:
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            now = self.tx.now()
            self._prefetch([command.work_id for command in commands])
            for command in commands:
                more, fences = self._submit_one(command, now)
                emits.extend(more)
                expected.update(fences)
            return emits, expected

        with fewer_collections():  # a bulk load: many containers, no cyclic garbage
            return self.tx.transact(decide)

    def accept(
        self,
        work_id: str,
        payload: Any = None,
        *,
        key: str | None = None,
        correlation_key: str | None = None,
    ) -> RecordedEvent:
        found: list[RecordedEvent] = []

        def decide() -> tuple[list[Emit], dict[str, int]]:
            found.clear()
            work = self.tx.projection.works.get(work_id)
            try:
                emit = lifecycle.accept_input(
                    work,
                    work_id=work_id,
                    payload=payload,
                    key=key,
                    correlation_key=correlation_key,
                )
            except Refusal as refusal:
                # A repeat of an accept the Work took before it ended: the recorded input.
                if refusal.code == DomainCode.WORK_TERMINAL and self._accepted(
                    work_id, payload, key, correlation_key
                ):
                    given = key if key is not None else lifecycle.derived_input_key(payload)
                    recorded = self.tx.store.find_delivery(input_identity(work_id, given))
                    assert recorded is not None
                    found.append(recorded)
                    return [], {}
                raise
            assert work is not None  # (accept_input refuses an unknown Work)
            return [emit], {work_stream(work_id): work.version}  # (see `_submit_one`)

        result = self.tx.transact(decide)
        return found[0] if found else result.recorded[0]


__all__ = ["SubmissionCommands", "result_start"]
