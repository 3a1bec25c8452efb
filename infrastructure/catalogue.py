"""Render the event catalogue (`docs/events.md`) from the event types themselves.

`python -m rota.infrastructure.catalogue > docs/events.md` regenerates it; a test fails when
the committed file and the types disagree, so the catalogue is never stale.
"""

from __future__ import annotations

import inspect
from typing import Any

import msgspec

from rota.domain.events import ALL_EVENTS, Event

HEADER = """# Event catalogue

Every event rota records, generated from `domain/events/` by
`python -m rota.infrastructure.catalogue > docs/events.md` (a test checks it is current).

Each row of the log stores the event's **type** (the tag below), its **type_version**, the
**stream** it belongs to, its **delivery identity** when it has one (appending an identity
already in the log is a no-op that returns the original event), and the payload: the JSON
object shown, with `type` equal to the tag. Fields with a default may be absent in old rows.

An operator command given a request id (`request_id=`, `--request-id`, the HTTP
`Idempotency-Key`) records the event that answers it under `request/<id>` (retry, cancel,
release, a gate's settlement, an interrupt's request: `| request/<id>` below), so a repeat
of the request finds it and appends nothing; an inject's request id is its input key, a
trigger's its fire key (docs/guide.md, "Operator requests that survive a retry").
"""


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "")
    return text.replace("<class '", "").replace("'>", "")


def render(events: tuple[type[Event], ...] = ALL_EVENTS) -> str:
    parts = [HEADER]
    for event_type in sorted(events, key=lambda t: t.tag()):
        doc = inspect.cleandoc(event_type.__doc__ or "").strip()
        parts.append(f"\n## `{event_type.tag()}` (v{event_type.version})\n")
        if doc:
            parts.append(f"\n{doc}\n")
        parts.append(f"\n- Stream: `{event_type.stream_pattern or '(varies)'}`\n")
        delivery = event_type.delivery_pattern
        parts.append(f"- Delivery identity: {f'`{delivery}`' if delivery else 'none'}\n")
        parts.append("- Fields:\n")
        for field in msgspec.structs.fields(event_type):
            default = ""
            if field.default is not msgspec.NODEFAULT:
                default = f" = `{msgspec.json.encode(field.default).decode()}`"
            elif field.default_factory is not msgspec.NODEFAULT:
                default = f" = `{msgspec.json.encode(field.default_factory()).decode()}`"
            parts.append(f"  - `{field.name}`: `{_type_name(field.type)}`{default}\n")
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
