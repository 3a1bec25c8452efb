"""Encoding domain events to their stored JSON form and back, with upcasting on read.

One encoder and one typed decoder over the union of all event types are built once. The
stored payload is the event's JSON object, its `type` tag included, so a row is readable in
any SQLite client. Decoding checks the stored `type` and `type_version` first: an unknown
tag, a version newer than this rota knows, or a payload that does not fit the schema fails
with `CorruptRecord` naming the log position, tag and version. An older version is upcast
through `rota.domain.upcasting` to the current shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Union

import msgspec

from rota.application.errors import CorruptRecord, PortCode
from rota.domain.events import ALL_EVENTS, Event
from rota.domain.upcasting import ADDITIVE, UPCASTERS, Upcaster, upcast
from rota.infrastructure.canonical import Check, canonical_check


class Codec:
    """Encodes and decodes one closed set of event types."""

    def __init__(
        self,
        events: Iterable[type[Event]] = ALL_EVENTS,
        upcasters: Mapping[tuple[str, int], Upcaster] = UPCASTERS,
        additive: frozenset[tuple[str, int]] = ADDITIVE,
    ) -> None:
        types = tuple(events)
        self.current: dict[str, int] = {}
        for event_type in types:
            tag = event_type.tag()
            if tag in self.current:
                raise ValueError(f"event tag {tag!r} is declared twice")
            self.current[tag] = event_type.version
        self._union: Any = Union[types] if len(types) > 1 else types[0]  # noqa: UP007
        self._decoder = msgspec.json.Decoder(self._union)
        self._many = msgspec.json.Decoder(list[self._union])  # type: ignore[name-defined]
        # Each event class's (tag, current version), as the log's type columns hold them.
        self._versions = {t: (t.tag(), t.version) for t in types}
        self._encoder = msgspec.json.Encoder(enc_hook=_plain)
        self._upcasters = upcasters
        # Older versions every step of whose chain only added fields with defaults
        # (`rota.domain.upcasting.ADDITIVE`): decoded as the current version is.
        self._direct = {
            (tag, old)
            for tag, version in self.current.items()
            for old in range(1, version)
            if all((tag, step) in additive for step in range(old, version))
        }
        # Each event class's canonical check (see `canonical`), built on its first use.
        self.checks: Mapping[type, Check] = _Checks(self._versions)
        # The classes with nested values written lean (`Event.lean_fields`), and the lean
        # JSON of each such value met lately (by identity: a binding's pinned snapshot is
        # one object for every claim of it, encoded once).
        self._lean = {t: t.lean_fields for t in types if t.lean_fields}
        self._lean_json: dict[int, tuple[object, msgspec.Raw]] = {}

    def encode(self, event: Event) -> tuple[str, int, bytes]:
        """Return `(type, type_version, payload)` for an event of a known type."""
        tag = event.tag()
        version = self.current.get(tag)
        if version is None:
            raise CorruptRecord(f"cannot encode {tag!r}: not a registered event type")
        return tag, version, self.encode_payload(event)

    def encode_many(self, events: Iterable[Event]) -> list[tuple[str, int, bytes]]:
        """`encode` of each event; a class seen before found at once (an append encodes
        hundreds of events of a few classes)."""
        kinds, payload, lean = self._versions, self._encoder.encode, self._lean
        encoded = []
        for event in events:
            kind = kinds.get(type(event))
            if kind is None:
                encoded.append(self.encode(event))
            elif type(event) in lean:
                encoded.append((kind[0], kind[1], self.encode_payload(event)))
            else:
                encoded.append((kind[0], kind[1], payload(event)))
        return encoded

    def encode_payload(self, event: Event) -> bytes:
        """The stored JSON of `event`: its nested `lean_fields` without their defaults."""
        fields = self._lean.get(type(event))
        if fields:
            wire = {name: self._lean_raw(getattr(event, name)) for name in fields}
            # (a Raw in a field of the event's copy: written as is, never validated)
            event = msgspec.structs.replace(event, **wire)
        return self._encoder.encode(event)

    def _lean_raw(self, value: object) -> object:
        """`value` as lean JSON (every field at its default left out, at every depth),
        ready to be written as it is (`msgspec.Raw`); None as it is."""
        if value is None:
            return None
        found = self._lean_json.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        raw = msgspec.Raw(self._encoder.encode(lean_builtins(value)))
        if len(self._lean_json) >= LEAN_CACHE:
            self._lean_json.clear()
        self._lean_json[id(value)] = (value, raw)
        return raw

    def decode(
        self, type_: str, type_version: int, data: bytes | str, position: int | None = None
    ) -> Event:
        """Decode one stored payload; errors name position, tag and version."""
        current = self.current.get(type_)
        if current == type_version or (type_, type_version) in self._direct:
            try:
                event: Event = self._decoder.decode(data)
            except msgspec.ValidationError as exc:
                raise _corrupt(
                    position, type_, type_version, f"does not fit the schema: {exc}"
                ) from exc
            except msgspec.DecodeError as exc:
                raise _corrupt(position, type_, type_version, f"is not valid JSON: {exc}") from exc
            if event.tag() != type_:
                raise _corrupt(position, type_, type_version, f"carries tag {event.tag()!r}")
            return event
        if current is None:
            raise _corrupt(
                position,
                type_,
                type_version,
                "has an unknown event type",
                code=PortCode.UNKNOWN_EVENT_TYPE,
            )
        if type_version > current:
            raise _corrupt(
                position,
                type_,
                type_version,
                f"was written by a newer rota (this one knows up to v{current}); upgrade rota",
                code=PortCode.UNKNOWN_EVENT_VERSION,
            )
        try:
            raw = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise _corrupt(position, type_, type_version, f"is not valid JSON: {exc}") from exc
        try:
            if not isinstance(raw, dict):
                raise _corrupt(position, type_, type_version, "is not a JSON object")
            upgraded = upcast(type_, type_version, current, raw, self._upcasters)
            result: Event = msgspec.convert(upgraded, self._union)
        except KeyError as exc:
            raise _corrupt(
                position, type_, type_version, f"cannot be upcast: {exc.args[0]}"
            ) from exc
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise _corrupt(
                position, type_, type_version, f"does not fit after upcasting: {exc}"
            ) from exc
        return result

    def decode_written(self, rows: Sequence[tuple[str, int, bytes, int]]) -> list[Event]:
        """Decode `(type, type_version, payload, position)` rows this codec encoded just now (an
        append's own rows, read back as a replay will see them), in one decoder call.

        The same events as `decode` one by one: a row that is not at its type's current
        version, or whose events do not all decode with their tags, is decoded one by one
        (and fails as `decode` does)."""
        try:
            events: list[Event] = self._many.decode(
                b"[" + b",".join([payload for _, _, payload, _ in rows]) + b"]"
            )
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        else:
            # Each decoded as its type column says, at its type's current version (an
            # older one is upcast, one by one below).
            versions = self._versions
            if len(events) == len(rows) and all(
                versions.get(type(event)) == (type_, type_version)
                for event, (type_, type_version, _, _) in zip(events, rows, strict=True)
            ):
                return events
        return [self.decode(*row) for row in rows]

    def canonical(self, event: Event | None) -> bool:
        """Whether `event` (of a type this codec encodes) is exactly what decoding its
        payload gives back (`rota.infrastructure.canonical`): an append that encoded it
        hands it back as it is, and decodes only the others. A new write is at its type's
        current version, so no upcaster applies to it."""
        return self.checks[type(event)](event)


class _Checks(dict[type, Check]):
    """Each event class's canonical check, built on its first use; never for another."""

    def __init__(self, versions: Mapping[type[Event], tuple[str, int]]) -> None:
        super().__init__()
        self._versions = versions

    def __missing__(self, cls: type) -> Check:
        check = canonical_check(cls) if cls in self._versions else _never
        self[cls] = check
        return check


def _never(event: object) -> bool:
    return False


LEAN_CACHE = 1024  # the lean JSON of this many nested values is kept (then forgotten)


def lean_builtins(value: Any) -> Any:
    """`value` for the encoder with every Struct field at its default left out, at every
    depth (as `omit_defaults` leaves out an event's own): decoding it fills the defaults
    back, so it reads as `value`. A field is left out only when its value is of its
    default's own type and equal to it (never a 0 for False, or 1 for 1.0)."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        if config.array_like:
            return value
        out: dict[str, Any] = {}
        if isinstance(config.tag, str):
            out[config.tag_field or "type"] = config.tag
        for field in msgspec.structs.fields(value):
            item = getattr(value, field.name)
            if field.default is not msgspec.NODEFAULT:
                default: Any = field.default
            elif field.default_factory is not msgspec.NODEFAULT:
                default = field.default_factory()
            else:
                default = _REQUIRED
            if type(item) is type(default) and item == default:
                continue
            out[field.encode_name] = lean_builtins(item)
        return out
    if isinstance(value, list | tuple):
        return [lean_builtins(item) for item in value]
    if isinstance(value, dict):
        return {key: lean_builtins(item) for key, item in value.items()}
    return value


_REQUIRED = object()  # (a required field is always written)


def _plain(obj: Any) -> Any:
    """Encode subclasses of datetime (e.g. freezegun's) as msgspec encodes a datetime."""
    if isinstance(obj, datetime):
        return obj.isoformat().replace("+00:00", "Z")
    raise TypeError(f"cannot encode objects of type {type(obj).__name__}")


def _corrupt(
    position: int | None,
    type_: str,
    version: int,
    what: str,
    code: PortCode = PortCode.CORRUPT_RECORD,
) -> CorruptRecord:
    where = f"event at position {position}" if position is not None else "event"
    return CorruptRecord(
        f"{where} (type {type_!r}, version {version}) {what}",
        position=position,
        type_=type_,
        type_version=version,
        code=code,
    )


DEFAULT_CODEC = Codec()
