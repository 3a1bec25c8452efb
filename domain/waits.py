"""Wait predicates: which input may resume a parked attempt (seed 001). Pure.

A waiting outcome may register one predicate with its park (`AttemptParked.wait`):
- `KeyWait(key)`: an input whose key is exactly `key`;
- `SchemaWait(schema)`: an input whose payload a JSON Schema subset accepts (`type`,
  `const`, `enum`, `required`, `properties`, `additionalProperties` as a boolean, `items`,
  `minimum`, `maximum`, `minLength`, `maxLength`); any other keyword is refused when the
  waiting result is validated, never ignored;
- `NamedWait(name)`: a predicate registered on the scheduler under `name`. It is code, not
  data, so the domain cannot judge it: the application layer does, and records each input it
  matched (`core.execution.wait_matched`), so replay never calls it again.

Only matching input resumes the parked attempt; the resume consumes the matching input
alone (by the Work's trigger selector) and its first one is the wake. Other input stays
pending, visible, and is judged again against the next wait the attempt registers. A park
without a predicate is woken by any input, as before predicates existed.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import msgspec

from rota.domain.emit import Emit, work_stream
from rota.domain.errors import DomainCode, InvalidCommand, Refusal
from rota.domain.events import WaitJudged, WorkHeld
from rota.domain.waits_types import KeyWait, NamedWait, SchemaWait, WaitPredicate

if TYPE_CHECKING:  # (the state holds predicates and asks `waking_inputs`: no import cycle)
    from rota.domain.state import AttemptState, PendingInput, WorkState

__all__ = [
    "KeyWait",
    "NamedWait",
    "SchemaWait",
    "WaitPredicate",
    "check_wait",
    "describe",
    "hold_wait",
    "matches",
    "named_wait",
    "queued_reason",
    "record_verdict",
    "schema_accepts",
    "unjudged",
    "waking_inputs",
]

NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}")
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
KEYWORDS = frozenset(
    {
        "type",
        "const",
        "enum",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "title",
        "description",
    }
)
MAX_SCHEMA_BYTES = 16 * 1024
MAX_SCHEMA_DEPTH = 16


def check_wait(wait: WaitPredicate) -> WaitPredicate:
    """Refuse a predicate that could never be judged as written (`invalid_wait`)."""
    if isinstance(wait, KeyWait):
        if not isinstance(wait.key, str) or not KEY.fullmatch(wait.key):
            raise _invalid(f"wait key {wait.key!r} must match {KEY.pattern}")
    elif isinstance(wait, NamedWait):
        if not isinstance(wait.name, str) or not NAME.fullmatch(wait.name):
            raise _invalid(f"wait predicate name {wait.name!r} must match {NAME.pattern}")
    else:
        size = len(msgspec.json.encode(wait.schema))
        if size > MAX_SCHEMA_BYTES:
            raise _invalid(f"wait schema is {size} bytes encoded; at most {MAX_SCHEMA_BYTES}")
        _check_schema(wait.schema, "schema", 0)
    return wait


def _invalid(message: str) -> InvalidCommand:
    return InvalidCommand(message, code=DomainCode.INVALID_WAIT)


def _check_schema(schema: Any, path: str, depth: int) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        raise _invalid(f"wait {path}: nested deeper than {MAX_SCHEMA_DEPTH} levels")
    if not isinstance(schema, dict):
        raise _invalid(f"wait {path}: a schema is a JSON object, not {type(schema).__name__}")
    unknown = sorted(set(schema) - KEYWORDS)
    if unknown:
        raise _invalid(
            f"wait {path}: keyword {unknown[0]!r} is not in the supported subset "
            f"({', '.join(sorted(KEYWORDS))})"
        )
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not names or any(not isinstance(n, str) or n not in TYPES for n in names):
            raise _invalid(f"wait {path}.type: {kinds!r} is not one of {sorted(TYPES)}")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise _invalid(f"wait {path}.enum: must be a list")
    required = schema.get("required", [])
    if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
        raise _invalid(f"wait {path}.required: must be a list of property names")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise _invalid(f"wait {path}.properties: must be an object of schemas")
    for name, sub in properties.items():
        _check_schema(sub, f"{path}.properties.{name}", depth + 1)
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"], bool):
        raise _invalid(f"wait {path}.additionalProperties: only true or false is supported")
    if "items" in schema:
        _check_schema(schema["items"], f"{path}.items", depth + 1)
    for bound in ("minimum", "maximum"):
        value = schema.get(bound, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _invalid(f"wait {path}.{bound}: must be a number")
    for bound in ("minLength", "maxLength"):
        value = schema.get(bound, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _invalid(f"wait {path}.{bound}: must be a non-negative integer")


def schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    """Whether `value` (a JSON value) is valid against a checked schema of the subset."""
    return _why_not(schema, value, "payload") is None


def _type_of(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    return {"object"} if isinstance(value, dict) else set()


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _why_not(schema: dict[str, Any], value: Any, path: str) -> str | None:
    kinds = schema.get("type")
    if kinds is not None:
        wanted = set(kinds if isinstance(kinds, list) else [kinds])
        if not wanted & _type_of(value):
            return f"{path} is not of type {'/'.join(sorted(wanted))}"
    if "const" in schema and not _same(schema["const"], value):
        return f"{path} is not {schema['const']!r}"
    if "enum" in schema and not any(_same(option, value) for option in schema["enum"]):
        return f"{path} is not one of {schema['enum']!r}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                return f"{path} has no {name!r}"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                reason = _why_not(properties[name], item, f"{path}.{name}")
                if reason is not None:
                    return reason
            elif schema.get("additionalProperties", True) is False:
                return f"{path} has {name!r}, which the schema does not allow"
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            reason = _why_not(schema["items"], item, f"{path}[{index}]")
            if reason is not None:
                return reason
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} is below {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} is above {schema['maximum']}"
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            return f"{path} is shorter than {schema['minLength']}"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path} is longer than {schema['maxLength']}"
    return None


def matches(wait: WaitPredicate | None, item: PendingInput, matched: Collection[str]) -> bool:
    """Whether `item` satisfies the wait. `matched`: the input keys a named predicate was
    recorded to match (the domain never calls a named predicate itself)."""
    if wait is None:
        return True
    if isinstance(wait, KeyWait):
        return item.key == wait.key
    if isinstance(wait, SchemaWait):
        return _why_not(wait.schema, item.payload, "payload") is None
    return item.key in matched


def queued_reason(attempt: AttemptState, item: PendingInput) -> str | None:
    """Why pending input does not resume the parked attempt (None: it does)."""
    wait = attempt.wait
    if matches(wait, item, attempt.wait_matched):
        return None
    if isinstance(wait, KeyWait):
        return f"the wait is for input key {wait.key!r}, not {item.key!r}"
    if isinstance(wait, SchemaWait):
        return f"the wait's schema refuses it: {_why_not(wait.schema, item.payload, 'payload')}"
    assert isinstance(wait, NamedWait)
    if item.key in attempt.wait_refused:
        return f"named predicate {wait.name!r} did not match it"
    return f"named predicate {wait.name!r} has not judged it yet (the next start pass does)"


def waking_inputs(work: WorkState) -> list[PendingInput]:
    """The pending input that may resume the Work's parked attempt, oldest first (all of
    its pending input when the attempt is not parked or registered no predicate)."""
    current = work.current
    if current is None or current.status != "parked" or current.wait is None:
        return list(work.pending)
    return [p for p in work.pending if matches(current.wait, p, current.wait_matched)]


def describe(wait: WaitPredicate | None) -> str:
    """The wait in words, as views show it."""
    if wait is None:
        return "any input"
    if isinstance(wait, KeyWait):
        return f"input key {wait.key!r}"
    if isinstance(wait, SchemaWait):
        return f"input matching schema {msgspec.json.encode(wait.schema).decode()}"
    return f"named predicate {wait.name!r}"


# -- named predicates: the application layer judges, the domain records ----------------


def named_wait(work: WorkState) -> tuple[AttemptState, NamedWait] | None:
    """The parked attempt and its named wait, when the Work waits on one and is not held."""
    current = work.current
    if work.terminal is not None or work.holds or current is None:
        return None
    if current.status != "parked" or not isinstance(current.wait, NamedWait):
        return None
    return current, current.wait


def unjudged(work: WorkState) -> list[PendingInput]:
    """The pending input a named wait has yet to judge (what the application must ask)."""
    found = named_wait(work)
    if found is None:
        return []
    attempt, _ = found
    judged = {*attempt.wait_matched, *attempt.wait_refused}
    return [p for p in work.pending if p.key not in judged]


def record_verdict(work: WorkState, attempt: int, epoch: int, key: str, matched: bool) -> Emit:
    """Record a named wait's verdict on input `key`, for parked attempt `attempt` at `epoch`."""
    found = named_wait(work)
    if found is None or found[0].number != attempt or found[0].epoch != epoch:
        raise Refusal(
            f"{work.work_id}/{attempt} is not parked at epoch {epoch} on a named wait",
            code=DomainCode.NOT_CURRENT,
        )
    current, wait = found
    if not any(p.key == key for p in work.pending):
        raise Refusal(f"Work {work.work_id!r} has no pending input {key!r}", code=DomainCode.IDLE)
    event = WaitJudged(
        work_id=work.work_id, attempt=attempt, epoch=epoch, name=wait.name, key=key, matched=matched
    )
    delivery = f"wait/{current.execution_id}/{epoch}/{key}"
    return Emit(work_stream(work.work_id), event, delivery)


def hold_wait(work: WorkState, reason: str) -> Emit:
    """Hold the Work (kind `wait`) when its named predicate cannot judge: unknown to this
    scheduler (after a restart without it), or raising. An operator releases it once the
    predicate is registered or fixed; its input is judged again then."""
    event = WorkHeld(work_id=work.work_id, kind="wait", reason=reason, holder="rota")
    return Emit(work_stream(work.work_id), event)
