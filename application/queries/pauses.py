"""What is paused now: each paused pool, key and scope, why, by whom and since when (the
`core.flow.paused` event that began it). Takes the service's lock; writes nothing."""

from __future__ import annotations

from datetime import datetime

import msgspec

from rota.application.service import SchedulerService
from rota.domain.events.flow import FlowPaused
from rota.domain.flow_ops import PAUSES, pause_name


class PauseView(msgspec.Struct, frozen=True, kw_only=True):
    """One pause in force: its target (`pool`, `key` or `scope`), name and reason, who
    paused it, and the log position and time of the event that paused it."""

    target: str
    name: str
    reason: str
    by: str
    position: int
    since: datetime


class PauseQueries:
    """The pauses in force, at the log head."""

    def __init__(self, service: SchedulerService) -> None:
        self.service = service

    def paused(self) -> list[PauseView]:
        """Every pause in force, by target then name."""
        service = self.service
        with service.lock:
            service.catch_up()
            paused = dict(service.projection.flow.paused)
            if not paused:
                return []
            began: dict[str, PauseView] = {}
            for recorded in service.store.read_stream(PAUSES):
                event = recorded.event
                if not isinstance(event, FlowPaused):
                    continue
                key = pause_name(event.target, event.name)
                if key in paused and recorded.position <= service.projection.position:
                    began[key] = PauseView(
                        target=event.target,
                        name=event.name,
                        reason=event.reason,
                        by=event.by,
                        position=recorded.position,
                        since=recorded.recorded_time,
                    )
        return sorted(began.values(), key=lambda view: (view.target, view.name))


__all__ = ["PauseQueries", "PauseView"]
