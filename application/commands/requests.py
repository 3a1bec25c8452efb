"""Request ids: a caller's id for one operator request, recorded as the delivery identity of
the event that answers it, so a repeat (a retry after a timeout, a crash, a restart) gets
the first answer back from the log and appends nothing.

retry, cancel, release, settle a gate and interrupt record their answering event under
`request/<id>` (the event's own identity otherwise: `retry-request/...`, `gate/...`,
`control/...`, or none). inject and a schedule's trigger take the id as the key they
already record (`input/<work>/<id>` with `control/<work>/inject/<id>`,
`schedule/<name>/manual/<id>`). A repeat is looked up by that identity under the
transaction loop's lock, after catching up, so two racing repeats still answer once; an id
recorded for another request (another operation, target or argument) is refused with
`request_id_reused`, never answered with someone else's result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from rota.application.errors import PortCode
from rota.application.ports import AppendResult, RecordedEvent
from rota.application.transactions import Decision, Transactions
from rota.domain.emit import Emit
from rota.domain.errors import InvalidCommand, Refusal
from rota.domain.events import accepted_input
from rota.domain.submission import INPUT_KEY

REQUEST_ID = INPUT_KEY  # the input-key alphabet: it may become an input's or a fire's key
REQUEST_ID_PATTERN = "[A-Za-z0-9._:@/-]{1,200}"


class Receipt(msgspec.Struct, frozen=True, kw_only=True):
    """What recorded a request: the event that answers it, where, and whether this call
    appended it (`repeated` False) or found it recorded by an earlier call (True)."""

    request_id: str | None
    type: str
    position: int
    delivery_id: str | None
    repeated: bool = False


def check_request_id(request_id: str) -> str:
    """The id, or `invalid_request_id` naming the pattern (a whole-string match)."""
    if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id):
        raise InvalidCommand(
            f"request id {request_id!r} must match {REQUEST_ID_PATTERN} "
            "(letters, digits and . _ : @ / -, 1 to 200 of them)",
            code=PortCode.INVALID_REQUEST_ID,
        )
    return request_id


def request_key(request_id: str, key: str | None, what: str) -> str:
    """The key a request id stands for (inject's input key, a trigger's fire key): the id
    itself, checked; a different `key` given beside it is refused."""
    check_request_id(request_id)
    if key is not None and key != request_id:
        raise InvalidCommand(
            f"{what}: give key {key!r} or request id {request_id!r}, not two different ones",
            code=PortCode.INVALID_REQUEST_ID,
        )
    return request_id


def request_identity(request_id: str) -> str:
    return f"request/{check_request_id(request_id)}"


class Asked(msgspec.Struct, frozen=True):
    """One request as its answering event must show it: the operation (for messages), the
    event types that answer it, its target (a Work, or a schedule: `target_field` names
    the event's field that holds it) and the fields the caller gave."""

    operation: str
    types: tuple[str, ...]
    target: str
    fields: Mapping[str, Any] = msgspec.field(default_factory=dict)
    target_field: str = "work_id"

    def answered_by(self, recorded: RecordedEvent) -> bool:
        event = recorded.event
        if recorded.type not in self.types:
            return False
        if getattr(event, self.target_field, None) != self.target:
            return False
        return all(getattr(event, name, None) == value for name, value in self.fields.items())

    def check(self, request_id: str, recorded: RecordedEvent) -> None:
        """Refuse an id recorded for another request (`request_id_reused`)."""
        if self.answered_by(recorded):
            return
        target = getattr(recorded.event, "work_id", None) or getattr(recorded.event, "name", "")
        raise Refusal(
            f"request id {request_id!r} was used for another request ({recorded.type} of "
            f"{target!r} at position {recorded.position}), not {self.operation} of "
            f"{self.target!r} with these arguments: a request id names one request; send "
            "a new one",
            code=PortCode.REQUEST_ID_REUSED,
        )


def receipt(result: AppendResult, request_id: str | None) -> Receipt:
    """The receipt of a command's result: its first event (the one that answers). A
    command that was a no-op without a request id (a retry or a gate settlement made
    before, found by its own identity) names no event: `type` "", `position` 0."""
    if not result.recorded:
        return Receipt(request_id=request_id, type="", position=0, delivery_id=None, repeated=True)
    first = result.recorded[0]
    # An input answers as `core.input.accepted`, the first one a Work's definition carries
    # too (its row holds the input's identity): the same receipt for either shape.
    answer = accepted_input(first.event) if first.delivery_id is not None else None
    return Receipt(
        request_id=request_id,
        type=first.type if answer is None else answer.tag(),
        position=first.position,
        delivery_id=first.delivery_id,
        repeated=result.written == 0,
    )


def other_request(tx: Transactions, request_id: str, asked: Asked) -> None:
    """Refuse an id that `request/<id>` records for another request (inject and trigger
    record theirs under their own key, and check here that no other request took it)."""
    recorded = tx.store.find_delivery(request_identity(request_id))
    if recorded is not None:
        asked.check(request_id, recorded)


def once(
    tx: Transactions,
    request_id: str | None,
    asked: Asked,
    decide: Decision,
    *,
    identity: str | None = None,
    keyed: Callable[[list[Emit], str], list[Emit]] | None = None,
) -> AppendResult:
    """Run `decide` through the loop once per request id.

    Without an id, it is `tx.transact(decide)`. With one, a recorded answer under
    `identity` (default `request/<id>`) is returned (checked against `asked`) and nothing
    is appended; otherwise the decided events are appended with the first one (or what
    `keyed` makes of them) recorded under that identity.
    """
    if request_id is None:
        return tx.transact(decide)
    identity = identity if identity is not None else request_identity(request_id)
    found: list[RecordedEvent] = []

    def decide_once() -> tuple[list[Emit], dict[str, int]]:
        found.clear()
        recorded = tx.store.find_delivery(identity)
        if recorded is not None:
            asked.check(request_id, recorded)
            found.append(recorded)
            return [], {}
        emits, expected = decide()
        if emits:
            emits = keyed(emits, identity) if keyed else first_keyed(emits, identity)
        return emits, expected

    result = tx.transact(decide_once)
    return AppendResult(found, 0) if found else result


def first_keyed(emits: list[Emit], identity: str) -> list[Emit]:
    """The first event recorded under `identity` (its own identity, if any, given up)."""
    return [msgspec.structs.replace(emits[0], delivery_id=identity), *emits[1:]]


__all__ = [
    "REQUEST_ID",
    "REQUEST_ID_PATTERN",
    "Asked",
    "Receipt",
    "check_request_id",
    "first_keyed",
    "once",
    "other_request",
    "receipt",
    "request_identity",
    "request_key",
]
