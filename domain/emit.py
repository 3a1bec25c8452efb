"""`Emit`: an event a decision wants appended, with its stream and delivery identity."""

from __future__ import annotations

import msgspec

from rota.domain.events import Event


class Emit(msgspec.Struct, frozen=True):
    stream: str
    event: Event
    delivery_id: str | None = None


def work_stream(work_id: str) -> str:
    return f"work/{work_id}"


def pool_stream(pool: str) -> str:
    return f"pool/{pool}"


def turn_stream(work_id: str) -> str:
    return f"turns/{work_id}"
