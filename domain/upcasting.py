"""Upcasters: pure functions that turn a stored payload of an old schema version into the next.

An upcaster receives the decoded JSON object of version `n` (a dict, `type` included) and
returns the object of version `n + 1`. The codec chains them on read, so a row written by an
old rota decodes as the current type; rows are never rewritten in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]

# (tag, from_version) -> upcaster producing from_version + 1.
UPCASTERS: Mapping[tuple[str, int], Upcaster] = {}


def upcast(
    tag: str,
    version: int,
    target: int,
    payload: Payload,
    upcasters: Mapping[tuple[str, int], Upcaster] = UPCASTERS,
) -> Payload:
    """Apply the chain `version -> ... -> target`; KeyError names the missing step."""
    while version < target:
        step = upcasters.get((tag, version))
        if step is None:
            raise KeyError(f"no upcaster for {tag} v{version} -> v{version + 1}")
        payload = step(payload)
        version += 1
    return payload
