"""The separate events a merged event stands for, as older rotas wrote them.

A Work's definition may carry its first input (`core.work.submitted` version 3, `input`)
and a claim its invoke marker (`core.execution.claimed` version 2, `invoked`): each is
exactly the separate event (`core.input.accepted`, `core.execution.invoked`) at the merged
event's own position. Readers that show events one by one (the decision log, traces) read
them through `carried`, so a log of either shape says the same things.
"""

from __future__ import annotations

from rota.domain.events.base import Event
from rota.domain.events.execution import AttemptClaimed, LaunchInvoked
from rota.domain.events.work import accepted_input


def invoke_marker(event: Event) -> LaunchInvoked | None:
    """The `core.execution.invoked` a claim carries (None: it carries none, or `event` is
    not a claim)."""
    if not isinstance(event, AttemptClaimed) or event.invoked is None:
        return None
    return LaunchInvoked(
        work_id=event.work_id,
        attempt=event.attempt,
        epoch=event.epoch,
        isolated=event.invoked.isolated,
    )


def carried(event: Event) -> tuple[Event, ...]:
    """The events `event` carries besides itself, in the order older rotas appended them
    after it: a definition's first input, a claim's invoke marker; () for any other."""
    if type(event) is AttemptClaimed:
        marker = invoke_marker(event)
        return () if marker is None else (marker,)
    found = accepted_input(event)
    return () if found is None or found is event else (found,)


__all__ = ["carried", "invoke_marker"]
