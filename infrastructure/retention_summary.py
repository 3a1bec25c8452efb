"""A pruned payload: an event's summary in place of its stored payload, marked `$pruned`.

The summary of an event is the event with each of its class's `pruned_fields` (inputs,
results, opaque metadata; a dotted name is a field of a nested value, such as the payload
of the first input a Work's definition carries) at its neutral value (the field's default,
else null), encoded as the codec encodes any event, with `{"$pruned":true,` in place of
the opening `{`. Every stored payload rota writes opens `{"type":`, so the prefix cannot
occur in one that was not pruned (an input that holds a `$pruned` key is nested inside,
never at the start), and the codec decodes a summary as it decodes any payload (it ignores
the unknown `$pruned` key): the folds see the event with the pruned fields at their
neutral values.

Why the class names what is removed rather than what is kept: a field added to an event
later is then kept by default, so a fold that starts reading it never meets a summary that
dropped it (retention saves space; personal data is `rota forget`'s job, not this one's).
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from rota.infrastructure.chain import PRUNED_MARKER, is_pruned
from rota.infrastructure.codec import Codec

MARKER = PRUNED_MARKER
S = TypeVar("S", bound=msgspec.Struct)


def summary(
    codec: Codec, type_: str, type_version: int, data: bytes | str, position: int
) -> bytes | None:
    """The summary payload of one stored row, or None when pruning it would change nothing
    (already pruned, or an event with no field to prune)."""
    if is_pruned(data) or codec.current.get(type_) != type_version:
        return None  # (an older version's row stays whole: its upcaster reads old shapes)
    event = codec.decode(type_, type_version, data, position)
    fields = type(event).pruned_fields
    if not fields:
        return None
    summarized = blanked(event, fields)
    if summarized == event:
        return None  # nothing to remove: the summary would be the payload itself
    encoded = codec.encode_payload(summarized)
    if not encoded.startswith(b"{"):
        raise ValueError(f"the payload at position {position} is not a JSON object")
    return MARKER + encoded[1:]


def blanked(value: S, fields: tuple[str, ...]) -> S:
    """`value` with each of `fields` at its neutral value (its default, else null); a
    dotted name (`input.payload`) blanks that field of the nested Struct, when it is set."""
    blank: dict[str, object] = {}
    nested: dict[str, list[str]] = {}
    for name in fields:
        head, dot, rest = name.partition(".")
        if dot:
            nested.setdefault(head, []).append(rest)
        else:
            blank[name] = _neutral(value, name)
    for name, inner in nested.items():
        held = getattr(value, name)
        if isinstance(held, msgspec.Struct):
            blank[name] = blanked(held, tuple(inner))
    return msgspec.structs.replace(value, **blank)


def _neutral(value: msgspec.Struct, name: str) -> object:
    field = next(f for f in msgspec.structs.fields(value) if f.name == name)
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    if field.default is not msgspec.NODEFAULT:
        return field.default
    return None


__all__ = ["MARKER", "blanked", "is_pruned", "summary"]
