"""Named invariants the simulator checks after every event (issue 29).

Each invariant is a small class whose docstring quotes the seed sentence it guards;
`Checker` folds the log event by event and asks each the events it reads, returning
`Violation`s (the invariant's name, what was wrong, the positions involved). `INVARIANTS`
maps every name to its docstring's first line.

```python
checker = Checker(scheduler.settings)
for event, row in store_records(scheduler.store):
    for violation in checker.observe(event, row):
        print(violation)
```
"""

from rota.testing.sim.invariants.base import Invariant, Violation
from rota.testing.sim.invariants.checker import (
    ALL,
    INVARIANTS,
    Checker,
    check_store,
    store_records,
)

__all__ = ["ALL", "INVARIANTS", "Checker", "Invariant", "Violation", "check_store", "store_records"]
