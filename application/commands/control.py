"""Control dispatch commands: inject, interrupt, dispatch passes and answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from rota.application.commands.requests import Asked, once, other_request, request_key
from rota.application.configuration import Configuration
from rota.application.errors import PortCode
from rota.application.ports import AppendResult, RecordedEvent
from rota.application.transactions import Transactions
from rota.domain import control
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import Refusal
from rota.domain.events.work import accepted_input, input_identity
from rota.domain.state import AttemptState, Control


class Dispatch(msgspec.Struct, frozen=True):
    """A control claimed for delivery: perform it, then answer with the same token."""

    work_id: str
    attempt: AttemptState
    control: Control
    token: str
    epoch: int
    payload: Any


class DispatchPass(msgspec.Struct):
    """What a dispatch pass claimed, and the attempts whose executor this host lacks."""

    dispatched: list[Dispatch]
    unsupported: list[AttemptState]


class ControlCommands:
    """Control's commands: inject and interrupt intents, their dispatch and answers."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config

    def inject(
        self,
        work_id: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str = "operator",
        request_id: str | None = None,
    ) -> AppendResult:
        """Accept input and ask the running attempt to take it now (a durable intent).

        A `request_id` is the input's key (`input/<work>/<id>`, the intent
        `control/<work>/inject/<id>`): a repeat answers with the recorded input, even once
        the attempt has ended; the id used for another request is `request_id_reused`."""
        if request_id is not None:
            key = request_key(request_id, key, "an inject's request id is its input key")
        found: list[RecordedEvent] = []

        def decide() -> tuple[list[Emit], dict[str, int]]:
            found.clear()
            if request_id is not None:
                repeat = self._injected(work_id, payload, request_id, by)
                if repeat is not None:
                    found.append(repeat)
                    return [], {}
            work = self.tx.projection.works.get(work_id)
            emits = control.request_inject(
                work, work_id=work_id, payload=payload, key=key, requested_by=by
            )
            assert work is not None
            return emits, {work_stream(work_id): work.version}

        result = self.tx.transact(decide)
        return AppendResult(found, 0) if found else result

    def _injected(
        self, work_id: str, payload: Any, request_id: str, by: str
    ) -> RecordedEvent | None:
        """The input an inject under `request_id` recorded, or None; `request_id_reused`
        when the id names another request."""
        asked = Asked(
            "inject",
            ("core.control.requested",),
            work_id,
            {"kind": "inject", "input_key": request_id, "requested_by": by},
        )
        other_request(self.tx, request_id, asked)
        store = self.tx.store
        requested = store.find_delivery(f"control/{work_id}/inject/{request_id}")
        accepted = store.find_delivery(input_identity(work_id, request_id))
        if accepted is None:
            return None
        input_event = accepted_input(accepted.event)  # (maybe the Work's first input)
        if requested is not None:
            asked.check(request_id, requested)
        # else: an inject into a parked attempt accepts the input alone (no intent: nothing
        # runs to deliver it to), as `accept` with that key would; the same payload again
        # is that input, another one is another request.
        given = msgspec.to_builtins(payload)
        recorded = input_event.payload if input_event is not None else None
        if msgspec.to_builtins(recorded) != given:
            raise Refusal(
                f"request id {request_id!r} injected another input into {work_id!r} "
                f"(position {accepted.position}): a request id names one request; send a "
                "new one",
                code=PortCode.REQUEST_ID_REUSED,
            )
        return accepted

    def interrupt(
        self, work_id: str, *, by: str = "operator", request_id: str | None = None
    ) -> AppendResult:
        """Fence the running attempt, leave the Work ready, then send the interrupt (with a
        `request_id`, once: its control request recorded under `request/<id>`)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.projection.works.get(work_id)
            emits = control.request_interrupt(work, work_id=work_id, requested_by=by)
            assert work is not None
            return emits, {work_stream(work_id): work.version}

        asked = Asked(
            "interrupt",
            ("core.control.requested",),
            work_id,
            {"kind": "interrupt", "requested_by": by},
        )
        return once(self.tx, request_id, asked, decide)

    def dispatch_pass(
        self,
        limit: int = 64,
        supported: Callable[[AttemptState], bool] = lambda attempt: True,
    ) -> DispatchPass:
        """Claim every dispatchable control intent (one append, a fresh token each).

        `supported(attempt)` says whether this host has the attempt's pinned executor; an
        intent for an unsupported attempt is not claimed (it would stay dispatched with no
        one to deliver it) and its attempt is reported in `unsupported`.
        """
        unsupported: dict[str, AttemptState] = {}

        def decide() -> tuple[list[Emit], dict[str, int]]:
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            unsupported.clear()
            for work_id in sorted({*self.tx.projection.live.values(), *self._interrupting()}):
                work = self.tx.projection.works[work_id]
                for item in work.controls:
                    if len(emits) < limit and control.dispatchable(work, item):
                        attempt = work.attempts[item.attempt - 1]
                        if not supported(attempt):
                            unsupported[attempt.execution_id] = attempt
                            continue
                        emits.append(control.dispatch(work, item.intent))
                        expected[work_stream(work_id)] = work.version
            return emits, expected

        dispatches: list[Dispatch] = []
        for recorded in self.tx.transact(decide).recorded:
            event = recorded.event
            work = self.tx.projection.works[recorded.stream[5:]]
            item = next(c for c in work.controls if c.intent == event.intent)  # type: ignore[attr-defined]
            attempt = work.attempts[item.attempt - 1]
            payload = next(
                (p.payload for p in work.pending if p.position == item.input_position), None
            )
            dispatches.append(
                Dispatch(work.work_id, attempt, item, event.token, event.epoch, payload)  # type: ignore[attr-defined]
            )
        return DispatchPass(dispatches, list(unsupported.values()))

    def _interrupting(self) -> set[str]:
        """Work whose fenced (interrupted) attempt still holds a slot and awaits its control."""
        found: set[str] = set()
        for holders in self.tx.projection.slots.values():
            for execution in holders:
                located = self.tx.projection.attempt(execution)
                if located is None:
                    continue
                work = located[0]
                if any(c.kind == "interrupt" and c.state == "pending" for c in work.controls):
                    found.add(work.work_id)
        return found

    def answer_control(self, work_id: str, intent: str, token: str, outcome: str) -> None:
        """Acknowledge (`ack`) or settle a dispatch, only under its same live token."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.work(work_id)
            if outcome == "ack":
                emit = control.acknowledge(work, intent, token)
            else:
                emit = control.settle(work, intent, token, outcome)
            return [emit], {work_stream(work_id): work.version}

        self.tx.transact(decide)
