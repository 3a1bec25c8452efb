"""The read side: every read model of the scheduler, typed (frozen msgspec Structs), each
query taking the service's lock itself and catching up to the log head where it reads the
projection. The facade, the CLI, the HTTP routes, the web view, `/metrics` and replay's
explain read the service only through these (a test forbids `.lock`, `.projection`,
`.transactions` and `host.directory` outside `rota.application`).

- `work_views`: the typed Work views and their one builder each (`rota work show --json`);
- `works`: a Work, the Works a page at a time, attempts, events, holds, counts;
- `capacity`: capacity and waiting by pool (a dry run of admission, or the last pass's);
- `state`: the applied position, budgets and ledgers, a look at the head, `/metrics`' read;
- `schedule_views`, `schedule_reads`: schedules list, show, next, history, explain;
- `schedule_health`: whether each schedule runs at its cadence (ok, stuck, quarantined);
- `activity`: the log newest first (a page of events), the Works by last activity, a
  Work's stream and the schedule fires that fed it, the Works failed for good;
- `series`: throughput, failures and latency by binding over time (the web view's charts);
- `pauses`: the pools, keys and scopes paused now, why and since when;
- `explain`: what `rota explain WORK` reads of the service (the fold is `rota.replay`).

`Queries` gathers them over one service and its host: `scheduler.queries`.
"""

from __future__ import annotations

from rota.application.host import Host
from rota.application.queries.activity import ActivityQueries
from rota.application.queries.capacity import CapacityQueries
from rota.application.queries.pauses import PauseQueries
from rota.application.queries.schedule_reads import ScheduleQueries
from rota.application.queries.series import SeriesQueries
from rota.application.queries.state import StateQueries
from rota.application.queries.works import WorkQueries
from rota.application.service import SchedulerService


class Queries:
    """Every read model over one service and the host that drives it."""

    def __init__(self, service: SchedulerService, host: Host) -> None:
        self.works = WorkQueries(service, host)
        self.capacity = CapacityQueries(service, host)
        self.state = StateQueries(service, host)
        self.schedules = ScheduleQueries(service)
        self.activity = ActivityQueries(service, host)
        self.series = SeriesQueries(service)
        self.pauses = PauseQueries(service)


__all__ = ["Queries"]
