"""Personal fields of an input payload: which paths a binding or a submit marks, and the
sealed form the log keeps of them (pure: the sealing itself is handed in).

A marked path is dotted (`email`, `address.street`): each segment names a key of an object
one level deeper. A marked value is replaced in the stored payload by a marker object
`{"$personal": "<token>"}`, the token being what the sealer returns (the application's
cipher: base64 of nonce and ciphertext). Reading walks the payload for markers and hands
each token, with the path it sits at, to an opener. Nothing here reads a key or a clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from rota.domain.errors import DomainCode, InvalidCommand

MARKER = "$personal"
SEGMENT = r"[A-Za-z0-9_@:-]{1,64}"
PATH = re.compile(rf"^{SEGMENT}(\.{SEGMENT}){{0,7}}$")
MAX_PATHS = 32

Sealer = Callable[[str, Any], str]  # (path, value) -> token
Opener = Callable[[str, str], Any]  # (path, token) -> value


def check_paths(paths: Iterable[object], where: str = "personal") -> tuple[str, ...]:
    """The marked paths, checked (`invalid_personal`): dotted keys, at most 32; a lone
    string is refused rather than read as its characters."""
    if isinstance(paths, str) or not isinstance(paths, list | tuple):
        raise InvalidCommand(
            f"{where} must be a list of dotted field paths (like ['email', 'address.street']), "
            f"not {type(paths).__name__}",
            code=DomainCode.INVALID_PERSONAL,
        )
    if len(paths) > MAX_PATHS:
        raise InvalidCommand(
            f"{where} marks {len(paths)} paths; at most {MAX_PATHS}",
            code=DomainCode.INVALID_PERSONAL,
        )
    for path in paths:
        if not isinstance(path, str) or not PATH.fullmatch(path):
            raise InvalidCommand(
                f"{where}: {str(path)[:80]!a} is not a dotted field path "
                f"(segments of {SEGMENT}, at most 8)",
                code=DomainCode.INVALID_PERSONAL,
            )
    return tuple(dict.fromkeys(paths))  # (in order, each once)


def is_marker(value: Any) -> bool:
    """Whether `value` is a sealed field's marker object."""
    return type(value) is dict and len(value) == 1 and type(value.get(MARKER)) is str


def seal_fields(payload: Any, paths: tuple[str, ...], seal: Sealer) -> Any:
    """`payload` with the value at each of `paths` replaced by its marker (`seal` gives the
    token); a path absent from the payload (or a null payload) is skipped. Refused
    (`invalid_personal`): a payload that is not an object, or a path through a value that
    is not one. The given payload is not changed: the objects on a marked path are copied."""
    if not paths or payload is None:  # (no input at all: nothing is marked)
        return payload
    if type(payload) is not dict:
        raise InvalidCommand(
            f"the input marks personal fields {list(paths)} but its payload is "
            f"{_kind(payload)}, not an object: mark fields of an object payload",
            code=DomainCode.INVALID_PERSONAL,
        )
    sealed: dict[str, Any] = dict(payload)
    for path in paths:
        _seal_one(sealed, path, seal)
    return sealed


def _seal_one(top: dict[str, Any], path: str, seal: Sealer) -> None:
    keys = path.split(".")
    holder = top
    for depth, key in enumerate(keys[:-1]):
        inner = holder.get(key)
        if inner is None and key not in holder:
            return  # absent: nothing to seal
        if type(inner) is not dict or is_marker(inner):
            where = ".".join(keys[: depth + 1])
            raise InvalidCommand(
                f"personal path {path!r}: {where} is {_kind(inner)}, not an object",
                code=DomainCode.INVALID_PERSONAL,
            )
        holder[key] = inner = dict(inner)  # a copy: the caller's payload is left as it is
        holder = inner
    last = keys[-1]
    if last in holder and not is_marker(holder[last]):
        holder[last] = {MARKER: seal(path, holder[last])}


def open_fields(payload: Any, open_: Opener) -> Any:
    """`payload` with every marker replaced by what `open_` gives for it (the payload
    itself when it holds none)."""
    if type(payload) is not dict or not has_markers(payload):
        return payload
    return _open(payload, "", open_)


def _open(value: dict[str, Any], prefix: str, open_: Opener) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"{prefix}{key}"
        if is_marker(item):
            out[key] = open_(path, item[MARKER])
        elif type(item) is dict:
            out[key] = _open(item, path + ".", open_)
        else:
            out[key] = item
    return out


def has_markers(payload: Any) -> bool:
    """Whether an object payload holds a marker at some object path."""
    if type(payload) is not dict:
        return False
    # (a loop, not `any` over a generator: every launch asks it of every input)
    for item in payload.values():
        if type(item) is dict and (is_marker(item) or has_markers(item)):
            return True
    return False


def unsealed(payload: Any, paths: tuple[str, ...]) -> list[str]:
    """The paths of `paths` whose value is present in `payload` and not sealed."""
    found: list[str] = []
    for path in paths:
        holder = payload
        for key in path.split("."):
            if type(holder) is not dict or key not in holder:
                holder = _ABSENT
                break
            holder = holder[key]
        if holder is not _ABSENT and not is_marker(holder):
            found.append(path)
    return found


_ABSENT = object()


def refuse_in_template(schedule: str, template: Any, paths: tuple[str, ...]) -> None:
    """Refuse (`invalid_personal`) a schedule whose input template holds a field its
    binding marks personal: a template is recorded in the clear with the schedule's
    definition, so no fire could keep it out of the log."""
    found = unsealed(template, paths) if paths and type(template) is dict else []
    if found:
        raise InvalidCommand(
            f"schedule {schedule!r}: its input holds {found[0]!r}, which its binding marks "
            "personal; a schedule's input is recorded in the clear, so it cannot hold "
            "personal fields (submit such Work with its own input instead)",
            code=DomainCode.INVALID_PERSONAL,
        )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if is_marker(value):
        return "a sealed personal value"
    return f"a {type(value).__name__}"  # (the value itself is never shown: it is personal)


__all__ = [
    "MARKER",
    "check_paths",
    "has_markers",
    "is_marker",
    "open_fields",
    "refuse_in_template",
    "seal_fields",
    "unsealed",
]
