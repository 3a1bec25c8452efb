"""Decisions of a Work's definition and its input: `submit` and `accept_input`, and the
command a submit carries from the facade to them (`SubmitWork`, its inputs `WorkInput`)."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any

import msgspec

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.domain.events.work import (
    Debounce,
    Throttle,
    Unique,
    WorkFlow,
    carrying,
    input_identity,
)
from rota.domain.flow import SCOPE, check_cost, check_keys, check_priority
from rota.domain.results import check_payload
from rota.domain.state import WorkState

WORK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
INPUT_KEY = re.compile(r"^[A-Za-z0-9._:@/-]{1,200}$")
# A binding's name, as a config file's `[[bindings]] name` takes it.
BINDING = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A binding grant's name, as a config file's `[[grants]] name` takes it.
GRANT = BINDING
MAX_GRANTS = 16


class WorkInput(msgspec.Struct, frozen=True, gc=False):
    """One input a submit accepts: its payload (a JSON value), its key (None: derived from
    the payload), its correlation key and the paths of its personal fields (sealed before
    the append by the application, `rota.application.personal`, which then clears them).
    Untracked by the garbage collector (a bulk submit makes thousands): a JSON payload holds
    no reference back to it, so it is in no cycle."""

    payload: Any = None
    key: str | None = None
    correlation_key: str | None = None
    personal: tuple[str, ...] = ()


class SubmitWork(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The command of one submit: a Work's definition and the inputs it accepts, in order.

    Built once where a submit enters (`Scheduler.submit`, `submit_many`, the CLI, the HTTP
    API, a schedule's fire) and handed unchanged through the application layer (a group
    commit, `LifecycleCommands.submit*`) to the decisions `submit` and `accept_input`."""

    work_id: str
    binding: str
    scope: str = "root"
    kind: str = "run-once"
    trigger: str = "all"
    safety: str = "undeclared"
    inputs: tuple[WorkInput, ...] = ()
    grants: tuple[str, ...] = ()
    priority: int = 0
    keys: tuple[str, ...] = ()
    cost: int = 1
    throttle: Throttle | None = None
    # Delivery options, not part of the definition (`rota.domain.coalescing`).
    debounce: Debounce | None = None
    unique: Unique | None = None


def new_work(command: SubmitWork, now: datetime) -> WorkState:
    """The state of the Work `command` defines, before its definition is applied (what its
    inputs are decided against when the Work is new: its flow fields are not read)."""
    return WorkState(
        work_id=command.work_id,
        scope=command.scope,
        binding=command.binding,
        kind=command.kind,
        trigger=command.trigger,
        safety=command.safety,
        grants=command.grants,
        version=0,
        submitted_at=now,
    )


def submit(existing: WorkState | None, command: SubmitWork) -> list[Emit]:
    """Define a Work. The same definition again is a no-op; another one is refused."""
    work_id, scope, binding = command.work_id, command.scope, command.binding
    kind, trigger, safety = command.kind, command.trigger, command.safety
    if not WORK_ID.fullmatch(work_id):
        raise InvalidCommand(
            f"Work id {work_id!r} must match {WORK_ID.pattern}", code=DomainCode.INVALID_WORK_ID
        )
    if not SCOPE.fullmatch(scope):
        raise InvalidCommand(
            f"scope {scope!r} must be a path like root/team/project", code=DomainCode.INVALID_SCOPE
        )
    if not BINDING.fullmatch(binding):
        raise InvalidCommand(
            f"binding {binding[:80]!a} must match {BINDING.pattern}", code=DomainCode.INVALID_WORK
        )
    grants = check_grants(command.grants) if command.grants else ()
    event = _submitted(work_id, scope, binding, kind, trigger, safety, grants)
    if command.keys or command.priority or command.cost != 1 or command.throttle is not None:
        event = msgspec.structs.replace(event, flow=_flow_fields(command))
    if existing is not None:
        same = (existing.scope, existing.binding, existing.kind, existing.trigger, existing.safety)
        # A resubmit does not change the priority (`reprioritize` does): keys, cost and
        # throttle are part of the definition.
        flow = (existing.keys, existing.cost, existing.throttle)
        if (
            same == (scope, binding, kind, trigger, safety)
            and existing.grants == grants
            and flow == (command.keys, command.cost, command.throttle)
        ):
            return []
        raise Refusal(
            f"Work {work_id!r} already exists with another definition "
            f"(scope {existing.scope!r}, binding {existing.binding!r}, kind {existing.kind!r}"
            + (f", grants {list(existing.grants)}" if existing.grants or grants else "")
            + ")",
            code=DomainCode.WORK_CONFLICT,
        )
    return [Emit(work_stream(work_id), event)]


def _flow_fields(command: SubmitWork) -> WorkFlow:
    """The flow-control fields of a submit, checked (`invalid_flow`)."""
    throttle = command.throttle
    if throttle is not None:
        check_keys((throttle.key,))
        if not (isinstance(throttle.period, int | float) and 0 < throttle.period <= 86400 * 366):
            raise InvalidCommand(
                f"throttle period {throttle.period!r} must be seconds, above 0 and at most a year",
                code=DomainCode.INVALID_FLOW,
            )
    return WorkFlow(
        priority=check_priority(command.priority),
        keys=tuple(check_keys(command.keys)),
        cost=check_cost(command.cost),
        throttle=throttle,
    )


def check_grants(grants: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse (`invalid_grant`) grant names that are malformed, repeated or too many."""
    if len(grants) > MAX_GRANTS:
        raise InvalidCommand(
            f"a Work opts into {len(grants)} grants; at most {MAX_GRANTS}",
            code=DomainCode.INVALID_GRANT,
        )
    for name in grants:
        if type(name) is not str or not GRANT.fullmatch(name):
            raise InvalidCommand(
                f"grant {str(name)[:80]!a} must match {GRANT.pattern}",
                code=DomainCode.INVALID_GRANT,
            )
    if len(set(grants)) != len(grants):
        raise InvalidCommand(
            f"grants {list(grants)} name one grant twice", code=DomainCode.INVALID_GRANT
        )
    return tuple(grants)


def _submitted(
    work_id: str,
    scope: str,
    binding: str,
    kind: str,
    trigger: str,
    safety: str,
    grants: tuple[str, ...] = (),
) -> WorkSubmitted:
    try:
        return msgspec.convert(
            {
                "work_id": work_id,
                "scope": scope,
                "binding": binding,
                "kind": kind,
                "trigger": trigger,
                "safety": safety,
                "grants": list(grants),
            },
            WorkSubmitted,
        )
    except msgspec.ValidationError as exc:
        raise InvalidCommand(
            f"invalid Work definition: {exc}", code=DomainCode.INVALID_WORK
        ) from exc


def derived_input_key(payload: Any, encoded: bytes | None = None) -> str:
    """A key derived from the payload, for callers that supply none; `encoded`: its JSON
    with object keys sorted, when the caller has it."""
    if encoded is None:
        encoded = msgspec.json.encode(payload, order="sorted")
    digest = hashlib.sha256(encoded).hexdigest()
    return f"sha256:{digest[:32]}"


def accept_input(
    work: WorkState | None,
    *,
    work_id: str,
    payload: Any = None,
    key: str | None = None,
    correlation_key: str | None = None,
) -> Emit:
    """Accept an input for a Work under delivery identity `input/<work>/<key>`."""
    if work is None:
        raise Refusal(f"no Work {work_id!r}: submit it first", code=DomainCode.UNKNOWN_WORK)
    if work.terminal is not None:
        raise Refusal(
            f"Work {work_id!r} is {work.terminal}; it accepts no more input",
            code=DomainCode.WORK_TERMINAL,
        )
    encoded = check_payload(payload, "input payload", sorted_keys=key is None)
    key = key if key is not None else derived_input_key(payload, encoded)
    if not INPUT_KEY.fullmatch(key):
        raise InvalidCommand(
            f"input key {key!r} must match {INPUT_KEY.pattern}", code=DomainCode.INVALID_KEY
        )
    if correlation_key is not None and not (
        isinstance(correlation_key, str) and INPUT_KEY.fullmatch(correlation_key)
    ):
        shown = repr(correlation_key)[:60]
        raise InvalidCommand(
            f"correlation key {shown} must match {INPUT_KEY.pattern} (as an input key)",
            code=DomainCode.INVALID_KEY,
        )
    event = InputAccepted(
        work_id=work_id, key=key, payload=payload, correlation_key=correlation_key
    )
    return Emit(work_stream(work_id), event, input_identity(work_id, key))


def carry_first_input(emits: list[Emit]) -> list[Emit]:
    """A new Work's submit (`emits`: its definition, then its inputs in order) with its
    first input carried by its definition (`WorkSubmitted.input`), under the input's own
    delivery identity: one event less, the same input at the same position (what the
    definition's position is). Anything else is returned as it is."""
    if len(emits) < 2:
        return emits
    first, second = emits[0], emits[1]
    submitted, accepted = first.event, second.event
    if (
        not isinstance(submitted, WorkSubmitted)
        or submitted.input is not None
        or not isinstance(accepted, InputAccepted)
        or second.stream != first.stream
        or accepted.work_id != submitted.work_id
    ):
        return emits
    merged = Emit(first.stream, carrying(submitted, accepted), second.delivery_id)
    return [merged, *emits[2:]]
