"""rota.testing: test your own code against a real rota scheduler, skipping time.

```python
from datetime import UTC, datetime, timedelta
import rota.testing

with rota.testing.open_test(start=datetime(2026, 3, 1, tzinfo=UTC)) as rt:
    rt.register("report", report, retry=rota.RetryPolicy(delays=[900]))
    rt.schedule("nightly", binding="report", cron="30 2 * * *", timezone="Europe/Berlin")
    rt.advance(timedelta(days=30))
    rt.assert_fired("nightly", at=[...])
    rt.assert_retried("some-work", after=[timedelta(minutes=15)])
```

- `open_test()` -> `TestScheduler` (`rota.testing.kit`): a real `rota.Scheduler` on a
  private `memory://` store with a `ManualClock`; `advance`, `advance_to`,
  `run_until_idle`, `run_until_quiet` move virtual time from due moment to due moment;
- `rota.testing.history`: what the log recorded (`fires`, `fired_at`, `skipped`,
  `attempts`, `retries`, `retried_after`, `held_by_budget`), for any `rota.Scheduler`;
- `rota.testing.assertions`: `assert_fired`, `assert_skipped`, `assert_retried`,
  `assert_held_by_budget`, with messages that show what differed;
- pytest fixtures (`rota_test`, `rota_start`, `rota_config`, the `rota_test` marker) come
  with `pip install rota` (`rota.testing.pytest_plugin`, a `pytest11` entry point).

`rota.testing.sim`, the deterministic simulator of the whole engine, is a subpackage of
its own; nothing here imports it. See docs/testing.md, "Testing your code".
"""

from rota.testing.assertions import (
    assert_fired,
    assert_held_by_budget,
    assert_retried,
    assert_skipped,
)
from rota.testing.history import (
    Attempt,
    BudgetHold,
    Fire,
    Retry,
    Skip,
    attempts,
    fired_at,
    fires,
    held_by_budget,
    retried_after,
    retries,
    skipped,
)
from rota.testing.kit import DEFAULT_START, TestScheduler, TimeSkipError, open_test
from rota.testing.moments import DueMoment, due_moments

__all__ = [
    "DEFAULT_START",
    "Attempt",
    "BudgetHold",
    "DueMoment",
    "Fire",
    "Retry",
    "Skip",
    "TestScheduler",
    "TimeSkipError",
    "assert_fired",
    "assert_held_by_budget",
    "assert_retried",
    "assert_skipped",
    "attempts",
    "due_moments",
    "fired_at",
    "fires",
    "held_by_budget",
    "open_test",
    "retried_after",
    "retries",
    "skipped",
]
