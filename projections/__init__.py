"""rota's projections: deterministic folds over the log (scheduler, capacity, history ...).

`PERSISTED` are the folds kept in a projection store (rows and a tracking position);
`DERIVED` are views computed from the scheduler projection's state. Every projection has
a `name`, a `version` (bumped when its fold changes meaning: a stored projection of another
version is rebuilt on open), `apply(position, stream, version, at, event)` and `digest()`.
"""

from rota.projections.derived import (
    DERIVED,
    BudgetsProjection,
    CapacityProjection,
    DerivedProjection,
    HoldsProjection,
)
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import SchedulerProjection

PERSISTED: tuple[type[SchedulerProjection] | type[HistoryProjection], ...] = (
    SchedulerProjection,
    HistoryProjection,
)
NAMES: tuple[str, ...] = tuple(p.name for p in PERSISTED) + tuple(d.name for d in DERIVED)

__all__ = [
    "DERIVED",
    "NAMES",
    "PERSISTED",
    "BudgetsProjection",
    "CapacityProjection",
    "DerivedProjection",
    "HistoryProjection",
    "HoldsProjection",
    "SchedulerProjection",
]
