"""Coalescing submits: a trailing debounce on a key (bounded by `max_wait`) and unique
Work on a key for a lifetime. Pure: what a submit that asks for either becomes, given the
Work holding its key, and the events that record it.

Nothing is dropped. A debounced submit while its key's window is open is merged into the
window's Work: its input is accepted on THAT Work (an attempt reads the whole ordered batch
of pending input, so the run reads every input of its window) and `core.submit.merged`
names the Work asked for, the key and the input. A unique submit refused by the key's
holder creates nothing and is recorded as `core.submit.suppressed` on the holder, with the
input's key and digest. Both are delivery identities `coalesced/<requested>/<input key>`,
so a repeated submit (same Work id, same input key) records nothing twice, as an input's
own identity `input/<work>/<key>` makes a repeated input a no-op.

The window of a debounce opens with the first submit on its key: its Work (the caller's
id) may not start before `first + wait`; each merged submit moves that to
`min(last + wait, first + max_wait)`, so a steady stream of submits delays the run by
`max_wait` at most (graphile-worker#583, arq PR #520). Once the Work has started, the
next submit opens a new window under its own id. Admission holds the Work back with the
waiting code `debounced` (`rota.domain.flow_checks`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

import msgspec

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.events import WorkSubmitted
from rota.domain.events.flow import CoalesceKeyTaken, SubmitMerged, SubmitSuppressed
from rota.domain.events.work import Debounce, Unique
from rota.domain.flow import check_keys
from rota.domain.state import WorkState, with_flow
from rota.domain.submission import SubmitWork

MAX_WAIT_FACTOR = 10  # a debounce's `max_wait` when none is given: 10 x `wait`
MAX_SECONDS = 86400 * 366  # a wait or max_wait is at most a year
UNTIL = ("until_terminal", "forever")
Action = Literal["open", "merge", "suppress", "plain"]
Kind = Literal["debounce", "unique"]


def check(command: SubmitWork) -> SubmitWork:
    """`command` with its debounce's `max_wait` resolved, or refused (`invalid_flow`)."""
    debounce, unique = command.debounce, command.unique
    if debounce is not None and unique is not None:
        raise InvalidCommand(
            "a submit asks for debounce or unique, not both", code=DomainCode.INVALID_FLOW
        )
    if unique is not None:
        if not isinstance(unique, Unique):
            raise _invalid(f"unique must be a rota.Unique, not {type(unique).__name__}")
        check_keys((unique.key,))
        if unique.until not in UNTIL:
            raise _invalid(f"unique until {unique.until!r} must be one of {', '.join(UNTIL)}")
        return command
    if debounce is None:
        return command
    if not isinstance(debounce, Debounce):
        raise _invalid(f"debounce must be a rota.Debounce, not {type(debounce).__name__}")
    check_keys((debounce.key,))
    wait = _seconds("debounce wait", debounce.wait)
    if debounce.max_wait is None:
        max_wait = min(wait * MAX_WAIT_FACTOR, float(MAX_SECONDS))
    else:
        max_wait = _seconds("debounce max_wait", debounce.max_wait)
        if max_wait < wait:
            raise _invalid(f"debounce max_wait {max_wait:g} s is below its wait {wait:g} s")
    resolved = Debounce(debounce.key, wait, max_wait)
    return command if resolved == debounce else msgspec.structs.replace(command, debounce=resolved)


def _seconds(what: str, value: object) -> float:
    if type(value) not in (int, float) or not 0 < value <= MAX_SECONDS:  # type: ignore[operator]
        raise _invalid(f"{what} {value!r} must be seconds, above 0 and at most a year")
    return float(value)  # type: ignore[arg-type]


def _invalid(message: str) -> InvalidCommand:
    return InvalidCommand(message, code=DomainCode.INVALID_FLOW)


def key_of(command: SubmitWork) -> tuple[Kind, str]:
    """The coalescing key a submit asks for: (`debounce` | `unique`, key)."""
    if command.debounce is not None:
        return "debounce", command.debounce.key
    assert command.unique is not None
    return "unique", command.unique.key


def key_stream(kind: str, key: str) -> str:
    """The stream of a coalescing key (`core.submit.key_taken`, fencing its openers)."""
    return f"coalesce/{kind}/{key}"


def identity(requested: str, input_key: str | None) -> str:
    """The delivery identity of a merged or suppressed submit of `requested`'s input."""
    return f"coalesced/{requested}" + ("" if input_key is None else f"/{input_key}")


def window_open(work: WorkState) -> bool:
    """A debounce window is open while its Work has neither started nor ended."""
    return work.debounce is not None and work.terminal is None and not work.attempts


def decide(command: SubmitWork, holder: WorkState | None, exists: bool) -> Action:
    """What a coalescing submit becomes, given the Work holding its key (None: none ever
    did) and whether the Work it names exists already.

    `merge` into the holder's open window; `suppress` in favour of a unique holder that is
    live, or whose lifetime or the submit's is `forever`; `open` a new Work that takes the
    key; `plain`: the named Work exists (a repeat, or a Work of a closed window), so the
    submit is an ordinary one on it and takes no key."""
    if command.debounce is not None:
        if holder is not None and window_open(holder):
            return "merge"
        return "plain" if exists else "open"
    assert command.unique is not None
    if holder is None or holder.work_id == command.work_id:
        return "plain" if exists else "open"
    lifetimes = (command.unique.until, holder.unique.until if holder.unique else "")
    if "forever" in lifetimes or holder.terminal is None:
        return "suppress"
    return "plain" if exists else "open"


def opened(emits: list[Emit], command: SubmitWork, now: datetime) -> list[Emit]:
    """A new Work's submit (`emits`, its definition first) that takes the command's key:
    its definition records the coalescing asked for (and a debounce's start times), and
    `core.submit.key_taken` follows."""
    first = emits[0]
    assert isinstance(first.event, WorkSubmitted)
    debounce = command.debounce
    if debounce is not None:
        assert debounce.max_wait is not None  # (resolved by `check`)
        flow = with_flow(
            first.event.flow,
            debounce=debounce,
            not_before=now + timedelta(seconds=debounce.wait),
            start_by=now + timedelta(seconds=debounce.max_wait),
        )
    else:
        flow = with_flow(first.event.flow, unique=command.unique)
    event = msgspec.structs.replace(first.event, flow=flow)
    kind, key = key_of(command)
    taken = CoalesceKeyTaken(kind=kind, key=key, work_id=command.work_id)
    return [
        Emit(first.stream, event, first.delivery_id),
        *emits[1:],
        Emit(key_stream(kind, key), taken, f"{key_stream(kind, key)}/{command.work_id}"),
    ]


def merged(holder: WorkState, command: SubmitWork, input_key: str | None, now: datetime) -> Emit:
    """`core.submit.merged`: the submit joins `holder`'s window, whose start moves to
    `min(now + wait, first + max_wait)`."""
    debounce = holder.debounce
    assert debounce is not None and holder.start_by is not None
    not_before = min(now + timedelta(seconds=debounce.wait), holder.start_by)
    if holder.not_before is not None:  # (never earlier than it was: a clock stepping back)
        not_before = max(not_before, holder.not_before)
    event = SubmitMerged(
        work_id=holder.work_id,
        requested=command.work_id,
        key=debounce.key,
        input_key=input_key,
        not_before=not_before,
    )
    return Emit(work_stream(holder.work_id), event, identity(command.work_id, input_key))


def suppressed(
    holder: WorkState, command: SubmitWork, input_key: str | None, digest: str | None
) -> Emit:
    """`core.submit.suppressed`: the submit creates nothing, in favour of `holder`."""
    assert command.unique is not None
    lifetimes = (command.unique.until, holder.unique.until if holder.unique else "")
    event = SubmitSuppressed(
        work_id=holder.work_id,
        requested=command.work_id,
        key=command.unique.key,
        until="forever" if "forever" in lifetimes else "until_terminal",
        input_key=input_key,
        input_digest=digest,
    )
    return Emit(work_stream(holder.work_id), event, identity(command.work_id, input_key))


__all__ = [
    "MAX_WAIT_FACTOR",
    "check",
    "decide",
    "identity",
    "key_of",
    "key_stream",
    "merged",
    "opened",
    "suppressed",
    "window_open",
]
