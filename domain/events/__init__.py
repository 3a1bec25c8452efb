"""Every domain event type, and the one union the codec decodes.

`ALL_EVENTS` lists each type once; a tag is never reused. Add a new type here and to
`docs/events.md` (a test checks the catalogue against this list).
"""

from __future__ import annotations

from .base import Event
from .work import InputAccepted, WorkSubmitted

ALL_EVENTS: tuple[type[Event], ...] = (
    WorkSubmitted,
    InputAccepted,
)

__all__ = ["ALL_EVENTS", "Event", "InputAccepted", "WorkSubmitted"]
