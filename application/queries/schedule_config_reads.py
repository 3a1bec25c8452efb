"""The schedules as a config file sees them: which ones the store has that the config no
longer defines, and what applying the config would do (`rota schedule apply --dry-run`,
`rota config validate`, `rota run` at start).

A schedule belongs to the config when its current definition came from one (`source`
`config`: `rota.projections.schedules_projection.source_of`); those the API defined are
never reported or pruned. Each read takes the service's lock and catches up to the head.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from rota.application.commands.schedules import definition_fields, unchanged, with_anchor
from rota.application.queries.schedule_views import ScheduleApplyPlan
from rota.application.service import SchedulerService
from rota.projections.schedules_projection import CONFIG_SOURCE


def not_in_config(service: SchedulerService, names: Collection[str]) -> list[str]:
    """The schedules (not removed) a config defined whose name is not in `names`, sorted."""
    with service.lock:
        service.catch_up()
        rows = service.schedules.projection.active()
        return sorted(r.name for r in rows if r.source == CONFIG_SOURCE and r.name not in names)


def apply_plan(
    service: SchedulerService, definitions: Mapping[str, Mapping[str, Any]]
) -> ScheduleApplyPlan:
    """What applying `definitions` (a config's `[[schedules]]`, name -> keywords) from the
    config would do, appending nothing."""
    fields = {name: definition_fields(name, **d) for name, d in definitions.items()}
    new: list[str] = []
    changed: list[str] = []
    same: list[str] = []
    with service.lock:
        service.catch_up()
        projection = service.schedules.projection
        for name in sorted(fields):
            row = projection.get(name)
            if row is None:
                new.append(name)
            elif unchanged(row, with_anchor(fields[name], row), CONFIG_SOURCE):
                same.append(name)
            else:
                changed.append(name)
    return ScheduleApplyPlan(
        new=new,
        changed=changed,
        unchanged=same,
        not_in_config=not_in_config(service, definitions),
    )
