"""The lean encoding of a Work row: each attempt's pinned binding stored once per distinct
content (a `binding/<digest>` row) and its trigger input not stored a second time.

A Work's attempts each pin the binding they run under (`Pinned`: the registration, the
binding, the settings in force), about 1 KiB that is the same for every attempt of every
Work submitted under one binding. A Work row names it by the first 32 hex digits of the
SHA-256 of its canonical encoding instead; the pinned content is one `binding/<digest>`
row. An attempt's trigger is one of the inputs it consumed, so the row holds only the
trigger's position (a trigger not among the consumed inputs, which the fold never makes,
is kept whole). A field at its default value is left out of the row (decoded back as the
default).

`WorkCodec` encodes and decodes Work rows for one projection: it remembers the bindings it
has seen (encoded or read from `binding/` rows) and which of them no store has yet
(`unsaved`). The encoding is deterministic, so the projection's digest is computed over
these rows: the digest string covers the binding's content.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from rota.domain.policy import Pinned
from rota.domain.state import AttemptState, PendingInput, WorkState


def _plain(obj: object) -> object:
    # A datetime subclass (freezegun's, in tests) encodes as a datetime would.
    if isinstance(obj, datetime):
        return obj.isoformat().replace("+00:00", "Z")
    raise TypeError(f"cannot encode {type(obj).__name__}")


# The one encoding of the projection's values, for its rows and its digest alike.
canonical_encoder = msgspec.json.Encoder(enc_hook=_plain)
BINDING_ROW = "binding/"
_replace = msgspec.structs.replace


def _lean_struct(name: str, source: type[Any], overrides: dict[str, Any]) -> Any:
    """A struct with `source`'s fields in order, some retyped, that leaves out of its
    encoding every field at its default (the row form)."""
    fields: list[tuple[Any, ...]] = []
    for f in msgspec.structs.fields(source):
        kind = overrides.get(f.name, f.type)
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, kind, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, kind))
    return msgspec.defstruct(name, fields, frozen=True, gc=False, omit_defaults=True)


_LeanAttempt: Any = _lean_struct(
    "LeanAttempt", AttemptState, {"pinned": str, "trigger": int | PendingInput | None}
)
_LeanWork: Any = _lean_struct("LeanWork", WorkState, {"attempts": tuple[_LeanAttempt, ...]})
_PINNED = AttemptState.__struct_fields__.index("pinned")
_TRIGGER = AttemptState.__struct_fields__.index("trigger")
_CONSUMED = AttemptState.__struct_fields__.index("consumed")
_ATTEMPTS = WorkState.__struct_fields__.index("attempts")
_astuple = msgspec.structs.astuple
_asdict = msgspec.structs.asdict
_lean_decoder = msgspec.json.Decoder(_LeanWork)
_pinned_decoder = msgspec.json.Decoder(Pinned)


class RowKeys(msgspec.Struct, frozen=True, gc=False):
    """What a listing's filter can judge from a Work row without decoding the Work
    (`WorkFilter.rules_out`): the row's other fields are skipped, not built."""

    scope: str
    binding: str
    terminal: str | None = None


row_keys = msgspec.json.Decoder(RowKeys).decode  # of a lean Work row


class WorkCodec:
    """Encodes and decodes the Work rows of one projection; see the module docstring."""

    def __init__(self) -> None:
        self.bindings: dict[str, bytes] = {}  # digest -> the pinned binding's encoding
        self.unsaved: set[str] = set()  # binding row keys no store holds yet
        self._digests: dict[bytes, str] = {}
        self._pinned: dict[str, Pinned] = {}

    def digest_of(self, pinned: Pinned) -> str:
        """The digest naming `pinned` (remembered, and marked unsaved, when new)."""
        encoded = canonical_encoder.encode(pinned)
        digest = self._digests.get(encoded)
        if digest is None:
            digest = hashlib.sha256(encoded).hexdigest()[:32]
            self._digests[encoded] = digest
            self.bindings[digest] = encoded
            self._pinned[digest] = pinned
            self.unsaved.add(BINDING_ROW + digest)
        return digest

    def learn(self, key: str, value: bytes) -> None:
        """A stored `binding/<digest>` row (its content is checked by decoding it)."""
        digest = key[len(BINDING_ROW) :]
        encoded = bytes(value)
        if hashlib.sha256(encoded).hexdigest()[:32] != digest:
            raise ValueError(f"row {key!r} does not hold the binding its key names")
        pinned = _pinned_decoder.decode(encoded)
        self.bindings[digest] = encoded
        self._digests[encoded] = digest
        self._pinned[digest] = pinned

    def learn_works(self, works: Iterable[WorkState]) -> None:
        """Remember the binding of every attempt of `works` (before listing row keys)."""
        for work in works:
            for attempt in work.attempts:
                self.digest_of(attempt.pinned)

    def binding_row(self, key: str) -> bytes | None:
        return self.bindings.get(key[len(BINDING_ROW) :])

    def encode(self, work: WorkState) -> bytes:
        """A Work's lean row."""
        lean = []
        for attempt in work.attempts:
            values = list(_astuple(attempt))
            trigger = values[_TRIGGER]
            if trigger is not None and trigger in values[_CONSUMED]:
                values[_TRIGGER] = trigger.position
            values[_PINNED] = self.digest_of(values[_PINNED])
            lean.append(_LeanAttempt(*values))
        values = list(_astuple(work))
        values[_ATTEMPTS] = tuple(lean)
        return canonical_encoder.encode(_LeanWork(*values))

    def decode(self, value: bytes) -> WorkState:
        """A Work from its lean row; KeyError if it names a binding not known here."""
        lean = _lean_decoder.decode(value)
        attempts = []
        for a in lean.attempts:
            fields = _asdict(a)
            fields["pinned"] = self._pinned[a.pinned]
            trigger = a.trigger
            if isinstance(trigger, int):
                found = next((p for p in a.consumed if p.position == trigger), None)
                if found is None:
                    raise ValueError(f"trigger {trigger} is not among the consumed inputs")
                fields["trigger"] = found
            attempts.append(AttemptState(**fields))
        fields = _asdict(lean)
        fields["attempts"] = tuple(attempts)
        return WorkState(**fields)


__all__ = ["BINDING_ROW", "RowKeys", "WorkCodec", "canonical_encoder", "row_keys"]
