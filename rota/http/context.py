"""What every route reaches: the scheduler facade, the token file, the `[http]` settings,
and whether the API is read-only (`rota serve`). The mutations' idempotency keys are
recorded in the log by the commands (`rota.http.routes.mutations`), not here."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from prometheus_client.registry import CollectorRegistry

from rota.http.tokens import TokenFile
from rota.infrastructure.config import HttpModel
from rota.scheduler import Scheduler


@dataclass
class ApiContext:
    """The app's state (`request.app.state.rota`): built once by whoever serves the app."""

    scheduler: Scheduler
    tokens: TokenFile
    settings: HttpModel
    metrics: CollectorRegistry
    read_only: bool = False
    # Set when the server stops: live tails (SSE) end at their next wake-up.
    closing: threading.Event = field(default_factory=threading.Event)
