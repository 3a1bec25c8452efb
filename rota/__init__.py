"""rota: an execution scheduler whose only source of truth is an append-only event log.

Embedding it:

```python
import rota

with rota.open("app.db") as scheduler:
    scheduler.register("greet", lambda ctx: {"hello": ctx.trigger["name"]})
    scheduler.submit("greet-ada", binding="greet", input={"name": "Ada"})
    scheduler.run_until_idle()
```

See docs/guide.md.
"""

from rota.application.errors import (
    ConcurrencyConflict,
    CorruptRecord,
    DeliveryConflict,
    ExecutorError,
    InvalidExecutorConfig,
    StoreError,
    StoreUnavailable,
)
from rota.application.ports import Clock, Executor, Gate, GateAnswer, LaunchContext, StartHold
from rota.domain.errors import (
    InvalidCommand,
    LeaseLost,
    NotEligible,
    Refusal,
    RotaError,
    SchemaError,
)
from rota.domain.policy import Binding, RetryPolicy, Settings
from rota.domain.results import Result
from rota.domain.state import PendingInput, WorkState
from rota.infrastructure.clock import ManualClock, SystemClock
from rota.infrastructure.config import Config, ConfigError
from rota.infrastructure.executors.inproc import Fail
from rota.opening import open
from rota.scheduler import Scheduler

__version__ = "0.1.0"

__all__ = [
    "Binding",
    "Clock",
    "ConcurrencyConflict",
    "Config",
    "ConfigError",
    "CorruptRecord",
    "DeliveryConflict",
    "Executor",
    "ExecutorError",
    "Fail",
    "Gate",
    "GateAnswer",
    "InvalidCommand",
    "InvalidExecutorConfig",
    "LaunchContext",
    "LeaseLost",
    "ManualClock",
    "NotEligible",
    "PendingInput",
    "Refusal",
    "Result",
    "RetryPolicy",
    "RotaError",
    "Scheduler",
    "SchemaError",
    "Settings",
    "StartHold",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "WorkState",
    "__version__",
    "open",
]
