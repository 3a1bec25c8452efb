"""What every route reaches: the scheduler facade, the token file, the `[http]` settings,
whether the API is read-only (`rota serve`), and the mutations' idempotency record."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import msgspec
from prometheus_client.registry import CollectorRegistry

from rota.http.tokens import TokenFile
from rota.infrastructure.config import HttpModel
from rota.scheduler import Scheduler

REMEMBERED_KEYS = 4096  # the idempotency keys (and their answers) one process remembers


class Idempotency:
    """The answers of the mutations already made, by (token, Idempotency-Key).

    The key is the delivery identity where the command has one it takes (an input's key:
    submit, accept, inject), so the log itself makes a repeat a no-op. Every mutation is
    also remembered here, with a digest of its route and body: a repeat gets the first
    answer, another request under the same key is refused (`idempotency_key_reused`)."""

    def __init__(self, size: int = REMEMBERED_KEYS) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[str, str], tuple[str, Any]] = OrderedDict()

    @staticmethod
    def fingerprint(route: str, body: Any) -> str:
        return hashlib.sha256(route.encode() + b"\0" + msgspec.json.encode(body)).hexdigest()

    def seen(self, token: str, key: str) -> tuple[str, Any] | None:
        with self._lock:
            return self._answers.get((token, key))

    def remember(self, token: str, key: str, fingerprint: str, answer: Any) -> None:
        with self._lock:
            self._answers[(token, key)] = (fingerprint, answer)
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)


@dataclass
class ApiContext:
    """The app's state (`request.app.state.rota`): built once by whoever serves the app."""

    scheduler: Scheduler
    tokens: TokenFile
    settings: HttpModel
    metrics: CollectorRegistry
    read_only: bool = False
    idempotency: Idempotency = field(default_factory=Idempotency)
    # Set when the server stops: live tails (SSE) end at their next wake-up.
    closing: threading.Event = field(default_factory=threading.Event)
