"""rota: an execution scheduler whose only source of truth is an append-only event log.

Embedding it:

```python
import rota

with rota.open("app.db") as scheduler:
    scheduler.register("greet", lambda ctx: {"hello": ctx.trigger["name"]})
    handle = scheduler.submit("greet-ada", binding="greet", input={"name": "Ada"})
    scheduler.run_until_idle()
    print(handle.result())  # {'hello': 'Ada'}
```

`rota.aio` is the same API for asyncio services.

See docs/guide.md.
"""

from rota.api_errors import (
    ApiCode,
    RegistrationError,
    WaitTimeout,
    WorkCancelled,
    WorkFailed,
)
from rota.application.commands.requests import Receipt
from rota.application.commands.waits import InjectAnswer
from rota.application.errors import (
    ConcurrencyConflict,
    CorruptRecord,
    DeliveryConflict,
    ExecutorError,
    InvalidExecutorConfig,
    StoreError,
    StoreUnavailable,
)
from rota.application.ports import (
    Clock,
    Executor,
    Gate,
    GateAnswer,
    LaunchContext,
    StartHold,
    WaitCheck,
)
from rota.application.queries.schedule_views import (
    BackfillResult,
    HistoryEntry,
    ScheduleExplanation,
    ScheduleVersion,
    ScheduleView,
    TriggeredFire,
    UpcomingTime,
)
from rota.application.queries.work_views import (
    AttemptView,
    ControlView,
    ErrorView,
    EventView,
    HoldView,
    PendingView,
    PhaseView,
    RetryView,
    SegmentView,
    WaitingView,
    WaitView,
    WorkSummary,
    WorkView,
)
from rota.domain.artifacts import Artifact
from rota.domain.errors import (
    InvalidCommand,
    LeaseLost,
    NotEligible,
    Refusal,
    RotaError,
    SchemaError,
)
from rota.domain.events.work import Debounce, Throttle, Unique
from rota.domain.failures import FailureCode
from rota.domain.policy import Binding, RetryPolicy, Settings
from rota.domain.results import Result
from rota.domain.state import PendingInput, WorkState
from rota.domain.waits_types import KeyWait, NamedWait, SchemaWait, WaitPredicate
from rota.embedded.handles import WorkHandle
from rota.embedded.opening import open
from rota.embedded.registering import TypedBinding
from rota.embedded.submission_values import Submission
from rota.infrastructure.clock import ManualClock, SystemClock
from rota.infrastructure.config import Config, ConfigError
from rota.infrastructure.executors.inproc import Fail
from rota.scheduler import Scheduler

__version__ = "0.1.0"

__all__ = [
    "ApiCode",
    "Artifact",
    "AttemptView",
    "BackfillResult",
    "Binding",
    "Clock",
    "ConcurrencyConflict",
    "Config",
    "ConfigError",
    "ControlView",
    "CorruptRecord",
    "Debounce",
    "DeliveryConflict",
    "ErrorView",
    "EventView",
    "Executor",
    "ExecutorError",
    "Fail",
    "FailureCode",
    "Gate",
    "GateAnswer",
    "HistoryEntry",
    "HoldView",
    "InjectAnswer",
    "InvalidCommand",
    "InvalidExecutorConfig",
    "KeyWait",
    "LaunchContext",
    "LeaseLost",
    "ManualClock",
    "NamedWait",
    "NotEligible",
    "PendingInput",
    "PendingView",
    "PhaseView",
    "Receipt",
    "Refusal",
    "RegistrationError",
    "Result",
    "RetryPolicy",
    "RetryView",
    "RotaError",
    "ScheduleExplanation",
    "ScheduleVersion",
    "ScheduleView",
    "Scheduler",
    "SchemaError",
    "SchemaWait",
    "SegmentView",
    "Settings",
    "StartHold",
    "StoreError",
    "StoreUnavailable",
    "Submission",
    "SystemClock",
    "Throttle",
    "TriggeredFire",
    "TypedBinding",
    "Unique",
    "UpcomingTime",
    "WaitCheck",
    "WaitPredicate",
    "WaitTimeout",
    "WaitView",
    "WaitingView",
    "WorkCancelled",
    "WorkFailed",
    "WorkHandle",
    "WorkState",
    "WorkSummary",
    "WorkView",
    "__version__",
    "open",
]
