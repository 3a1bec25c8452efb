"""What one submit asks for (`rota.Submission`, the items of `Scheduler.submit_many`, or
their mapping form `SubmissionFields`), the `SubmitWork` command it becomes (carried unchanged
to the domain's decision), and what its append recorded (the position of the input it
accepted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Required, TypedDict

import msgspec

from rota.application.ports import AppendResult, EventStore, RecordedEvent
from rota.domain.emit import work_stream
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events.work import Debounce, Throttle, Unique, accepted_input
from rota.domain.personal import check_paths
from rota.domain.submission import SubmitWork, WorkInput, derived_input_key

COALESCED = ("core.submit.merged", "core.submit.suppressed")


class Submission(msgspec.Struct, frozen=True):
    """One Work to submit, with `Scheduler.submit()`'s arguments and defaults (`input`
    left unset: no input; a run-once Work then gets an empty one)."""

    work_id: str
    binding: str
    input: Any = msgspec.UNSET
    input_key: str | None = None
    correlation_key: str | None = None
    scope: str = "root"
    kind: str = "run-once"
    trigger: str = "all"
    safety: str = "undeclared"
    grants: Sequence[str] = ()
    priority: int = 0
    keys: Sequence[str] = ()
    cost: int = 1
    throttle: Throttle | Mapping[str, Any] | None = None
    debounce: Debounce | None = None
    unique: Unique | None = None
    personal: Sequence[str] = ()


class SubmitOptions(TypedDict, total=False):
    """`Scheduler.submit`'s keyword arguments after `binding` (meaning and defaults there)."""

    input: Any
    input_key: str | None
    correlation_key: str | None
    scope: str
    kind: str
    trigger: str
    safety: str
    grants: Sequence[str]
    priority: int
    keys: Sequence[str]
    cost: int
    throttle: Throttle | Mapping[str, Any] | None
    debounce: Debounce | None
    unique: Unique | None
    personal: Sequence[str]


class SubmissionFields(SubmitOptions, total=False):
    """A `Submission` spelled as a mapping (an item of `Scheduler.submit_many`): the same
    fields, `work_id` and `binding` required."""

    work_id: Required[str]
    binding: Required[str]


def as_submission(item: Submission | SubmissionFields) -> Submission:
    """`item` as a `Submission` (a mapping with a field it does not have is a TypeError)."""
    return item if isinstance(item, Submission) else Submission(**item)


def submit_command(item: Submission) -> SubmitWork:
    """The command `item` asks for: its definition and the input it accepts (none when
    `input` is unset, except a run-once Work's empty input under key `submit`); its
    personal paths ride on the input, to be sealed (`rota.application.personal`)."""
    if item.input is not msgspec.UNSET:
        personal = check_paths(item.personal) if item.personal else ()
        inputs: tuple[WorkInput, ...] = (
            WorkInput(item.input, item.input_key, item.correlation_key, personal),
        )
    elif item.kind == "run-once":
        inputs = (WorkInput(None, item.input_key or "submit", item.correlation_key),)
    else:
        inputs = ()
    return SubmitWork(
        work_id=item.work_id,
        binding=item.binding,
        scope=item.scope,
        kind=item.kind,
        trigger=item.trigger,
        safety=item.safety,
        inputs=inputs,
        grants=_grants(item.grants),
        priority=item.priority,
        keys=_keys(item.keys),
        cost=item.cost,
        throttle=as_throttle(item.throttle),
        debounce=item.debounce,
        unique=item.unique,
    )


def _grants(grants: object) -> tuple[str, ...]:
    """The grant names a submit opts into, as a tuple (a list or tuple of names; a lone
    string is refused rather than read as its characters)."""
    if isinstance(grants, str) or not isinstance(grants, list | tuple):
        raise InvalidCommand(
            f"grants must be a list of grant names, not {type(grants).__name__}",
            code=DomainCode.INVALID_GRANT,
        )
    return tuple(grants)


def _keys(keys: object) -> tuple[str, ...]:
    """The concurrency keys of a submit, as a tuple (a lone string is refused)."""
    if isinstance(keys, str) or not isinstance(keys, list | tuple):
        raise InvalidCommand(
            f"keys must be a list of keys (like ['tenant:acme']), not {type(keys).__name__}",
            code=DomainCode.INVALID_FLOW,
        )
    return tuple(keys)


def as_throttle(throttle: object) -> Throttle | None:
    """A submit's throttle: a `rota.Throttle`, or a mapping `{"key": ..., "period": ...}`
    (`submit_many`'s mapping items, the HTTP body), its period in seconds as a float (so
    the log holds one spelling of it); anything else is `invalid_flow`."""
    if throttle is None:
        return None
    if isinstance(throttle, Mapping):
        if set(throttle) != {"key", "period"}:
            raise InvalidCommand(
                f"throttle must have the fields key and period, not {sorted(map(str, throttle))}",
                code=DomainCode.INVALID_FLOW,
            )
        key, period = throttle["key"], throttle["period"]
    elif isinstance(throttle, Throttle):
        key, period = throttle.key, throttle.period
    else:
        raise InvalidCommand(
            "throttle must be rota.Throttle(key, period) or {'key': ..., 'period': ...}, not "
            f"{type(throttle).__name__}",
            code=DomainCode.INVALID_FLOW,
        )
    if isinstance(period, bool) or not isinstance(period, int | float):
        raise InvalidCommand(
            f"throttle period {period!r} must be a number of seconds", code=DomainCode.INVALID_FLOW
        )
    if not isinstance(key, str):
        raise InvalidCommand(
            f"throttle key {key!r} must be a string (like tenant:acme)",
            code=DomainCode.INVALID_FLOW,
        )
    return Throttle(key, float(period))


def coalesced_into(command: SubmitWork, recorded: AppendResult) -> RecordedEvent | None:
    """The `core.submit.merged` or `core.submit.suppressed` a coalescing submit recorded
    (or found recorded): its `work_id` is the Work the submit went to."""
    if command.debounce is None and command.unique is None:
        return None
    for event in recorded.recorded:
        if event.type in COALESCED and getattr(event.event, "requested", None) == command.work_id:
            return event
    return None


def input_position(
    command: SubmitWork, recorded: AppendResult, store: EventStore, work_id: str | None = None
) -> int | None:
    """The log position of the input a submit's append accepted, or found already
    accepted (a retried submit's delivery identity returns the original event; a retry
    after the Work ended appends nothing, and the input's delivery is looked up), on
    `work_id` (default: the command's Work; another: the window it was merged into)."""
    work_id = command.work_id if work_id is None else work_id
    stream = work_stream(work_id)
    for event in recorded.recorded:
        if event.stream == stream and accepted_input(event.event) is not None:
            return event.position  # (a separate input, or the first one a definition carries)
    for given in command.inputs:
        key = given.key if given.key is not None else derived_input_key(given.payload)
        found = store.find_delivery(f"input/{work_id}/{key}")
        if found is not None:
            return found.position
    return None


__all__ = [
    "Submission",
    "SubmissionFields",
    "SubmitOptions",
    "as_submission",
    "as_throttle",
    "coalesced_into",
    "input_position",
    "submit_command",
]
