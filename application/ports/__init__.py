"""The ports: every contract between rota's application layer and its adapters.

One package of protocols, data types and their contract prose, and nothing else: what an
adapter must do, and what the application may rely on, is read here (as APScheduler 4's
`abc.py`), one module per contract. Each contract says what is atomic, how it is ordered
and what each error means. The package imports only `rota.domain`, the standard library
and msgspec (tests/unit/test_architecture.py). Adapters live in `rota.infrastructure`;
`rota.bootstrap` chooses them. Replay imports the data types from here without importing
any adapter. Every name is re-exported here: `from rota.application.ports import X`.

- `records`: the log's records (`NewEvent`, `RecordedEvent`, `RawRecord`, `LogHead`,
  `AppendResult`, `TreeHead`), with the log's timestamp form (`timestamps`).
- `event_store`: `EventStore`, the append-only, hash-chained log (SQLite, PostgreSQL, memory).
- `projection_store`: `ProjectionStore`, the projections kept beside the log with the
  position they applied (`ProjectionMeta`, `Persisted`, `WriterLock`).
- `executor`: `Executor` and `LaunchContext`, how an attempt is launched, recovered,
  stopped, reached (`StopEvidence`, `Recovery`, `Done`, `CAPABILITIES`; `ctx.cancel` is a
  `CancelEvent`, `cancel_event`).
- `clock`: `Clock`, the one source of the current time.
- `personal`: `PersonalKeys` (the per-Work keys beside the log) and `PersonalCipher` (what
  seals a personal input field under one).
- `hooks`: `Gate` (with `GateAnswer`, `StartHold`), `WaitCheck`, `Environment`,
  `AppendObserver` and `TraceContext`: the start gates, named wait predicates,
  run-environment hook, append observers and trace context a host is given.
"""

from __future__ import annotations

from rota.application.ports.clock import Clock
from rota.application.ports.event_store import EventStore
from rota.application.ports.executor import (
    CAPABILITIES,
    Done,
    Executor,
    Launch,
    LaunchContext,
    PersistMany,
    Recovery,
    StopEvidence,
    persist_each,
)
from rota.application.ports.hooks import (
    AppendObserver,
    Environment,
    Gate,
    GateAnswer,
    StartHold,
    TraceContext,
    WaitCheck,
)
from rota.application.ports.personal import PersonalCipher, PersonalKeys
from rota.application.ports.projection_store import (
    Persisted,
    ProjectionMeta,
    ProjectionStore,
    WriterLock,
)
from rota.application.ports.records import (
    AppendResult,
    LogHead,
    NewEvent,
    RawRecord,
    RecordedEvent,
    StoreSpace,
    StoreState,
    TreeHead,
)

__all__ = [
    "CAPABILITIES",
    "AppendObserver",
    "AppendResult",
    "Clock",
    "Done",
    "Environment",
    "EventStore",
    "Executor",
    "Gate",
    "GateAnswer",
    "Launch",
    "LaunchContext",
    "LogHead",
    "NewEvent",
    "PersistMany",
    "Persisted",
    "PersonalCipher",
    "PersonalKeys",
    "ProjectionMeta",
    "ProjectionStore",
    "RawRecord",
    "RecordedEvent",
    "Recovery",
    "StartHold",
    "StopEvidence",
    "StoreSpace",
    "StoreState",
    "TraceContext",
    "TreeHead",
    "WaitCheck",
    "WriterLock",
    "persist_each",
]
