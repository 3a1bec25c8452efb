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


class WorkSubmitted(Event, tag="core.work.submitted", frozen=True, kw_only=True):
    """A Work was defined: its id, scope, binding, kind, trigger selector and lost-retry safety.

    Always version 1 of the Work's stream; submitting the same definition again is a no-op
    and a different definition under the same id is refused (`work_conflict`). `trigger`
    chooses which pending input an attempt consumes: `all` (the whole ordered batch, the
    first triggering), `first` (only the oldest), `last` (the whole batch, the newest
    triggering). `grants` are the binding grants the Work opted into, in order (each
    attempt's pinned binding has their config applied); [] before grants.
    """

    stream_pattern: ClassVar[str] = "work/<work>"

    work_id: str
    scope: str
    binding: str
    kind: WorkKind = "run-once"
    trigger: TriggerSelector = "all"
    safety: LostRetrySafety = "undeclared"
    grants: list[str] = msgspec.field(default_factory=list)
    # Flow control (`rota.domain.flow`): higher priority starts first; the concurrency keys
    # the Work counts under (its first is its fair-share flow); the tokens a start takes
    # from each rate bucket; and a throttle: at most one start of the key a period.
    priority: int = 0
    keys: list[str] = msgspec.field(default_factory=list)
    cost: int = 1
    throttle: Throttle | None = None
    # Coalescing (`rota.domain.coalescing`): the debounce window the Work opened (it starts
    # at `not_before`, moved by each merged submit, never past `start_by`), or the unique
    # key it holds.
    debounce: Debounce | None = None
    unique: Unique | None = None
    not_before: datetime | None = None
    start_by: datetime | None = None


class InputAccepted(Event, tag="core.input.accepted", frozen=True, kw_only=True):
    """An input was accepted for a Work. Its log position is its acceptance sequence.

    The delivery identity carries the caller's key, or one derived from the payload, so a
    caller that retries after a crash never queues the same input twice. `correlation_key`
    names the thread a turn published by the attempt it triggers belongs to.
    """

    stream_pattern: ClassVar[str] = "work/<work>"
    delivery_pattern: ClassVar[str | None] = "input/<work>/<key>"

    work_id: str
    key: str
    payload: Any = None
    correlation_key: str | None = None


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
