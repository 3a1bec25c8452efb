"""Events of Work and its input: what was submitted, what input was accepted for it."""

from datetime import datetime
from typing import Any, ClassVar, Literal

import msgspec

from rota.domain.events.base import Event

WorkKind = Literal["run-once", "standing"]
TriggerSelector = Literal["all", "first", "last"]
LostRetrySafety = Literal["undeclared", "idempotent", "deduplicated"]


class Throttle(msgspec.Struct, frozen=True, gc=False):
    """At most one start of the Works throttled on `key` every `period` seconds (a rate
    bucket `throttle:<key>` of one token); a start due later waits, it is never dropped."""

    key: str
    period: float


class Debounce(msgspec.Struct, frozen=True, gc=False):
    """Trailing debounce on `key`: the submits on the key within one window run as ONE
    Work, reading every input of the window, which starts `wait` seconds after the last
    submit, and at the latest `max_wait` seconds after the first (None: 10 x `wait`,
    recorded resolved). A later submit is merged (`core.submit.merged`), never dropped."""

    key: str
    wait: float
    max_wait: float | None = None


UniqueUntil = Literal["until_terminal", "forever"]


class Unique(msgspec.Struct, frozen=True, gc=False):
    """At most one Work on `key` for a lifetime: while the Work holding the key is not
    terminal (`until_terminal`), or ever (`forever`). A submit the key refuses creates
    nothing and is recorded on the holder (`core.submit.suppressed`), never dropped."""

    key: str
    until: UniqueUntil = "until_terminal"


class WorkFlow(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A Work's flow control (`rota.domain.flow`) and coalescing (`rota.domain.coalescing`),
    as its definition records them and its state keeps them: higher `priority` starts
    first; the concurrency `keys` it counts under (the first is its fair-share flow); the
    tokens (`cost`) a start takes from each rate bucket; a `throttle` (at most one start of
    the key a period); the `debounce` window it opened (it starts at `not_before`, moved
    by each merged submit, never past `start_by`) or the `unique` key it holds. A Work
    with none of them has no `WorkFlow` at all (`flow` is null), which costs a plain
    submit nothing."""

    priority: int = 0
    keys: tuple[str, ...] = ()
    cost: int = 1
    throttle: Throttle | None = None
    debounce: Debounce | None = None
    unique: Unique | None = None
    not_before: datetime | None = None
    start_by: datetime | None = None


NO_FLOW = WorkFlow()


class FlowFields:
    """The flow fields of a Struct with a `flow: WorkFlow | None` field, read through (at
    their defaults when `flow` is null): what `WorkSubmitted` and `WorkState` share."""

    __slots__ = ()
    flow: WorkFlow | None

    @property
    def priority(self) -> int:
        return 0 if self.flow is None else self.flow.priority

    @property
    def keys(self) -> tuple[str, ...]:
        return () if self.flow is None else self.flow.keys

    @property
    def cost(self) -> int:
        return 1 if self.flow is None else self.flow.cost

    @property
    def throttle(self) -> Throttle | None:
        return None if self.flow is None else self.flow.throttle

    @property
    def debounce(self) -> Debounce | None:
        return None if self.flow is None else self.flow.debounce

    @property
    def unique(self) -> Unique | None:
        return None if self.flow is None else self.flow.unique

    @property
    def not_before(self) -> datetime | None:
        return None if self.flow is None else self.flow.not_before

    @property
    def start_by(self) -> datetime | None:
        return None if self.flow is None else self.flow.start_by


class CarriedInput(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The first input of a Work, carried by its `core.work.submitted` (version 3) instead
    of a `core.input.accepted` of its own: the same fields, the same meaning (a null
    `payload` or `correlation_key` is left out of the stored JSON)."""

    key: str
    payload: Any = None
    correlation_key: str | None = None


class WorkSubmitted(
    Event, FlowFields, tag="core.work.submitted", frozen=True, kw_only=True, omit_defaults=True
):
    """A Work was defined: its id, scope, binding, kind, trigger selector and lost-retry safety,
    and (version 3) its first input.

    Always version 1 of the Work's stream; submitting the same definition again is a no-op
    and a different definition under the same id is refused (`work_conflict`). `trigger`
    chooses which pending input an attempt consumes: `all` (the whole ordered batch, the
    first triggering), `first` (only the oldest), `last` (the whole batch, the newest
    triggering). `grants` are the binding grants the Work opted into, in order (each
    attempt's pinned binding has their config applied); [] before grants.

    `flow` is null for a Work that asks for no flow control or coalescing; else an object
    with every field of `WorkFlow`: `priority` (int), `keys` (list of str), `cost` (int),
    `throttle` ({key, period} or null), `debounce` ({key, wait, max_wait} or null),
    `unique` ({key, until} or null), `not_before` and `start_by` (times or null).
    Version 1 wrote those fields flat, beside `grants` (flow control's first release), or
    not at all (before it); it is upcast to `flow` on read.

    `input` is the Work's first input (`{key, payload, correlation_key}`), or null when the
    submit accepted none: it is exactly a `core.input.accepted` at this event's position
    (its acceptance sequence, which `consumed` and `trigger` of a claim name), under the
    input's own delivery identity `input/<work>/<key>` (this row's), so a retried submit
    never queues it twice and a later input with that key is a duplicate of it (the same
    payload: a no-op returning this event) or refused (another payload). Its `payload` is
    what retention prunes and what personal fields are sealed in. Version 2 (no `input`)
    reads as `input` null; a Work's first input there is a `core.input.accepted` of its own.
    Version 3 is a new version, not an added field, so that an older rota refuses the row
    instead of reading the Work without its input. Version 3 leaves out every field at its
    default (`kind` run-once, `trigger` all, `safety` undeclared, `grants` [], `flow` and
    `input` null): an absent field reads as its default.
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "input/<work>/<key>"  # (when it carries `input`)

    work_id: str
    scope: str
    binding: str
    kind: WorkKind = "run-once"
    trigger: TriggerSelector = "all"
    safety: LostRetrySafety = "undeclared"
    grants: list[str] = msgspec.field(default_factory=list)
    # Flow control and coalescing (`WorkFlow`): null on a Work that asks for none of them,
    # so a plain submit writes one short field (version 1 wrote eight, flat: upcast).
    flow: WorkFlow | None = None
    # The first input, accepted with the definition (null: none, or an older version).
    input: CarriedInput | None = None

    version: ClassVar[int] = 3
    pruned_fields: ClassVar[tuple[str, ...]] = ("input.payload",)
    pruned_since: ClassVar[int] = 3


class InputAccepted(Event, tag="core.input.accepted", frozen=True, kw_only=True):
    """An input was accepted for a Work. Its log position is its acceptance sequence.

    The delivery identity carries the caller's key, or one derived from the payload, so a
    caller that retries after a crash never queues the same input twice. `correlation_key`
    names the thread a turn published by the attempt it triggers belongs to. A Work's first
    input is carried by its `core.work.submitted` (`input`, version 3) instead: the same
    input at that event's position, under the same identity (`accepted_input` reads both).
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "input/<work>/<key>"

    work_id: str
    key: str
    payload: Any = None
    correlation_key: str | None = None

    pruned_fields: ClassVar[tuple[str, ...]] = ("payload",)


def input_identity(work_id: str, key: str) -> str:
    """The delivery identity of an input: `input/<work>/<key>`."""
    return f"input/{work_id}/{key}"


def accepted_input(event: Event) -> InputAccepted | None:
    """The input `event` accepts, as a `core.input.accepted` at the event's own position:
    the event itself, or the first input a `core.work.submitted` carries; else None. Every
    reader of inputs goes through it, so a carried input is read exactly as a separate one."""
    if isinstance(event, InputAccepted):
        return event
    if isinstance(event, WorkSubmitted) and event.input is not None:
        carried = event.input
        return InputAccepted(
            work_id=event.work_id,
            key=carried.key,
            payload=carried.payload,
            correlation_key=carried.correlation_key,
        )
    return None


def carrying(submitted: WorkSubmitted, accepted: InputAccepted) -> WorkSubmitted:
    """`submitted` carrying `accepted` as its first input (`input`)."""
    carried = CarriedInput(
        key=accepted.key, payload=accepted.payload, correlation_key=accepted.correlation_key
    )
    return msgspec.structs.replace(submitted, input=carried)


def same_delivery(recorded: Event, given: Event) -> bool:
    """Whether `given`, appended under a delivery identity `recorded` holds, is that same
    delivery: an equal event, or an input equal to the one a `core.work.submitted` carries
    under it (a retried submit, or a later input with the first input's key)."""
    if recorded == given:
        return True
    if type(given) is InputAccepted and type(recorded) is WorkSubmitted:
        return accepted_input(recorded) == given
    return False


class BindingServed(Event, tag="core.binding.served", frozen=True, kw_only=True):
    """A scheduler that runs Work (`rota run`, `Scheduler.run`) had an executor for
    `binding` when it began running: a submit from any process accepts Work on it from now
    on, while a binding known nowhere (not defined in the submitter, never served) is
    refused at submit (`unknown_binding`). Recorded once per binding name, ever (its
    delivery identity); `owner` is the scheduler that first served it. Folds ignore it."""

    stream_pattern: ClassVar[str] = "binding/<binding>"
    delivery_pattern: ClassVar[str | None] = "binding/<binding>/served"

    binding: str
    owner: str


def binding_served_identity(binding: str) -> str:
    """The delivery identity of `BindingServed` for `binding`."""
    return f"binding/{binding}/served"


class WorkForgotten(Event, tag="core.work.forgotten", frozen=True, kw_only=True):
    """The personal data of Work `work_id` was forgotten (`rota forget`): the key its personal
    input fields were sealed under was destroyed, so those fields can no longer be read from
    the log, an export or a backup. Records that it was forgotten, never what. `by` names
    who asked (an operator, a token) and `reason` why (a ticket), both free text the caller
    gives. Recorded once per Work (its delivery identity). Folds ignore it."""

    stream_pattern: ClassVar[str] = "personal/<work>"
    delivery_pattern: ClassVar[str | None] = "personal/<work>/forgotten"

    work_id: str
    by: str = ""
    reason: str = ""


def forgotten_identity(work_id: str) -> str:
    """The delivery identity of `WorkForgotten` for `work_id`."""
    return f"personal/{work_id}/forgotten"
