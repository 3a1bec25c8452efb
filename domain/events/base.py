"""The base of every domain event: a frozen msgspec Struct with a stable dotted tag.

An event's tag (`core.work.submitted`) is its name forever: it is stored in the log's `type`
column and inside the JSON payload, and is never reused for another shape. Its schema
`version` (a class variable, default 1) is stored beside it; a change that is not additive
(a field renamed, removed or retyped) bumps it and registers an upcaster in
`rota.domain.upcasting`, so old rows are read as the current shape and never rewritten.
Additive changes keep the version and give the new field a default.
"""

from typing import ClassVar

import msgspec

# No `from __future__ import annotations` in the modules that define stored types: their
# annotations are resolved when the class is created, so a test that freezes time (and
# rebinds the module-level name `datetime`) cannot change what the decoder expects.


class Event(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=False, gc=False
):
    """A fact that happened. Subclasses set `tag=` and may raise `version`.

    `gc=False`: events are immutable and hold only decoded JSON, so they cannot form
    reference cycles; keeping them out of the cyclic garbage collector makes reading and
    replaying the log much faster.
    """

    version: ClassVar[int] = 1
    # Documentation that docs/events.md is generated from: the stream an event is appended
    # to, and the pattern of its delivery identity when it has one.
    stream_pattern: ClassVar[str] = ""
    delivery_pattern: ClassVar[str | None] = None
    # The fields a retention prune blanks (to their neutral value: None, or the field's
    # default) when it replaces a stored payload by the event's summary: inputs, results,
    # opaque metadata. Everything else (ids, states, outcomes) is kept, so the folds give
    # the same Work states from a summary (`rota.infrastructure.retention_summary`).
    # A dotted name (`input.payload`) blanks that field of a nested Struct, when it is set.
    pruned_fields: ClassVar[tuple[str, ...]] = ()
    # The first version of the event whose rows hold a pruned field: a row of an older
    # version has none (nothing to prune) rather than one no summary can be written for.
    pruned_since: ClassVar[int] = 1
    # Nested Struct fields whose own fields at their defaults the stored JSON leaves out, at
    # every depth (the codec writes them so; decoding fills the defaults back in).
    lean_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def tag(cls) -> str:
        # Cached per class: `__struct_config__` builds a new config object on every read,
        # and the tag is read several times for every event appended and applied.
        tag = _TAGS.get(cls)
        if tag is None:
            found = cls.__struct_config__.tag
            if not isinstance(found, str):
                raise TypeError(f"{cls.__name__} has no string tag")
            tag = _TAGS[cls] = found
        return tag


_TAGS: dict[type[Event], str] = {}  # each event class's tag, once read (a pure memo)
