"""Small builders for contract tests."""

from __future__ import annotations

from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted


def submitted(work: str, binding: str = "b") -> NewEvent:
    return NewEvent(f"work/{work}", WorkSubmitted(work_id=work, scope="root", binding=binding))


def accepted(work: str, seq: int, payload: object = None, delivery: str | None = None) -> NewEvent:
    return NewEvent(
        f"work/{work}",
        InputAccepted(work_id=work, key=f"k{seq}", payload=payload),
        delivery,
    )
