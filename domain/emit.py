"""`Emit`: an event a decision wants appended, with its stream and delivery identity."""

from __future__ import annotations

import msgspec

from rota.domain.events import Event


class Emit(msgspec.Struct, frozen=True, gc=False):
    # gc=False: strings and an event (itself gc=False) cannot form a reference cycle, and
    # one is made for every event decided: kept out of the cyclic collector's counts.
    stream: str
    event: Event
    delivery_id: str | None = None


def work_stream(work_id: str) -> str:
    return f"work/{work_id}"


def pool_stream(pool: str) -> str:
    return f"pool/{pool}"


def turn_stream(work_id: str) -> str:
    return f"turns/{work_id}"
