"""What explaining a ready Work reads (`rota explain WORK`, `rota.replay.explain`): the
scheduler projection at the log head, the configuration that pins its binding, the store's
time, a dry run of admission over the ready queue (who would start, who waits why), and
the newest starts of the log's tail (what fair share and priority served meanwhile).

The explanation itself is a fold of the Work's own stream in `rota.replay.explain`; this
query is the one way it reads the service's state.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from rota.application.configuration import Configuration
from rota.application.live_projections import stored_scheduler
from rota.application.ports import EventStore, ProjectionStore
from rota.application.queries.capacity import dry_run_starts
from rota.application.queries.flow import RecentStart, recent_starts
from rota.application.service import SchedulerService
from rota.application.transactions import Transactions
from rota.domain import admission
from rota.domain.policy import Settings
from rota.domain.state import WorkState
from rota.projections.scheduler import SchedulerProjection


class ReadyLook(NamedTuple):
    """The projection at the log head, the configuration, the time, the ready queue (oldest
    first), the dry run of admission over it and the newest starts (oldest first). Read it,
    never change it."""

    projection: SchedulerProjection
    configuration: Configuration
    now: datetime
    ready: list[WorkState]
    plan: admission.Plan
    starts: list[RecentStart]


def ready_look(
    store: EventStore, service: SchedulerService | None, projections: ProjectionStore | None
) -> ReadyLook:
    """The service's projection at the log head (loaded from `projections` when it has
    applied nothing yet, else folded), or without a service a fresh fold with the default
    settings; and a dry run of admission over its ready queue."""
    if service is None:
        tx = Transactions(store)
        if projections is not None:
            loaded = stored_scheduler(projections, store)
            if loaded is not None:
                tx.projection = loaded
        tx.catch_up()
        configuration = Configuration(settings=Settings(), owner="explain")
        return _look(store, tx.projection, configuration, tx.now())
    with service.lock:
        if projections is not None and service.projection.position == 0:
            loaded = stored_scheduler(projections, store)
            if loaded is not None:
                service.projection = loaded
        service.catch_up()
        return _look(store, service.projection, service.configuration, service.now())


def _look(
    store: EventStore,
    projection: SchedulerProjection,
    configuration: Configuration,
    now: datetime,
) -> ReadyLook:
    ready = projection.ready_order()
    plan = dry_run_starts(projection, configuration, now, ready)
    starts = recent_starts(store, projection)
    return ReadyLook(projection, configuration, now, ready, plan, starts)


__all__ = ["ReadyLook", "ready_look"]
