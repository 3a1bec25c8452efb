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

_FLOW_FIELDS = (
    "priority",
    "keys",
    "cost",
    "throttle",
    "debounce",
    "unique",
    "not_before",
    "start_by",
)
_FLOW_DEFAULTS: dict[str, Any] = {"priority": 0, "keys": [], "cost": 1}


def _work_submitted_v1(payload: Payload) -> Payload:
    """`core.work.submitted` 1 -> 2: the flow fields, flat in version 1 (written from flow
    control's first release; absent before it), move into `flow`, null when all are at
    their defaults."""
    flow = {name: payload.pop(name) for name in _FLOW_FIELDS if name in payload}
    asked = any(value != _FLOW_DEFAULTS.get(name) for name, value in flow.items())
    return {**payload, "flow": flow if asked else None}


def _work_submitted_v2(payload: Payload) -> Payload:
    """`core.work.submitted` 2 -> 3: version 3 may carry the Work's first input (`input`);
    a version 2 row never does (its first input is a `core.input.accepted` of its own), so
    it reads as `input` null, the field's default: the payload is unchanged."""
    return payload


def _attempt_claimed_v1(payload: Payload) -> Payload:
    """`core.execution.claimed` 1 -> 2: version 2 may carry the invoke marker (`invoked`);
    a version 1 claim never does (its marker is a `core.execution.invoked` of its own, or
    none yet), so it reads as `invoked` null, the field's default: the payload is unchanged."""
    return payload


# (tag, from_version) -> upcaster producing from_version + 1.
UPCASTERS: Mapping[tuple[str, int], Upcaster] = {
    ("core.work.submitted", 1): _work_submitted_v1,
    ("core.work.submitted", 2): _work_submitted_v2,
    ("core.execution.claimed", 1): _attempt_claimed_v1,
}
# The steps whose upcaster leaves the payload as it is (the new version only added fields
# with defaults, and bumped the version so that an older rota refuses its rows): a row
# whose every step to the current version is here decodes with the current type's decoder
# directly (what the upcaster chain gives, without building the payload as a dict).
ADDITIVE: frozenset[tuple[str, int]] = frozenset(
    {("core.work.submitted", 2), ("core.execution.claimed", 1)}
)


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
