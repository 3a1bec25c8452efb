"""A real API on loopback: a scheduler over a fresh SQLite store, its daemon loop on a
thread, and uvicorn on port 0 on another (started when it listens: an Event, no sleep),
with a token of each scope. `api.client(token)` is an httpx client for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import rota
from rota.http.app import create_app
from rota.http.context import ApiContext
from rota.http.metrics import registry
from rota.http.server import HttpServer
from rota.http.tokens import TokenFile
from rota.infrastructure.config import HttpModel

TIMEOUT = 30.0


@dataclass
class Api:
    scheduler: rota.Scheduler
    server: HttpServer
    tokens: dict[str, str]
    context: ApiContext
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, token: str | None = "operate", **headers: str) -> httpx.Client:
        if token is not None:
            headers.setdefault("Authorization", f"Bearer {self.tokens.get(token, token)}")
        client = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)
        self.clients.append(client)
        return client

    def head(self) -> Any:
        return self.scheduler.store.head()


def token_file(path: Path) -> tuple[TokenFile, dict[str, str]]:
    tokens = TokenFile.load(path, missing_ok=True)
    made = {
        scope: tokens.add(f"{scope}-token", frozenset([scope]))
        for scope in ("read", "operate", "admin")
    }  # type: ignore[list-item]
    return TokenFile.load(path), made


def start_api(
    scheduler: rota.Scheduler,
    tmp_path: Path,
    *,
    read_only: bool = False,
    settings: HttpModel | None = None,
) -> Api:
    tokens, made = token_file(tmp_path / "tokens.json")
    settings = settings or HttpModel(listen="127.0.0.1:0")
    context = ApiContext(
        scheduler=scheduler,
        tokens=tokens,
        settings=settings,
        metrics=registry(
            scheduler, budget=settings.metrics_series_budget, scope_depth=settings.scope_depth
        ),
        read_only=read_only,
    )
    server = HttpServer(create_app(context), "127.0.0.1", 0, closing=context.closing).start()
    return Api(scheduler, server, made, context)


def echo(ctx: Any) -> Any:
    return {"echo": ctx.trigger}


def fail(ctx: Any) -> Any:
    raise RuntimeError("no")


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[rota.Scheduler]:
    config = {"bindings": [{"name": "later", "executor": "shell", "command": ["true"]}]}
    with rota.open(tmp_path / "api.db", config=config, owner="api-test") as s:
        s.register("echo", echo)
        s.register("fail", fail)
        yield s


@pytest.fixture
def api(scheduler: rota.Scheduler, tmp_path: Path) -> Iterator[Api]:
    """The daemon's API: the loop runs on a thread, as under `rota run --http`."""
    stop = threading.Event()
    # What `run` records before its first pass, recorded here first: a test's view of the
    # log (`Api.head`) is then not raced by the loop's start.
    scheduler.record_served()
    loop = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    loop.start()
    served = start_api(scheduler, tmp_path)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        served.server.stop()
        scheduler.stop()
        loop.join(TIMEOUT)


@pytest.fixture
def idle_api(scheduler: rota.Scheduler, tmp_path: Path) -> Iterator[Api]:
    """The API over a scheduler whose loop does not run (tests drive `tick()` themselves)."""
    served = start_api(scheduler, tmp_path)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        served.server.stop()


@pytest.fixture
def served(scheduler: rota.Scheduler, tmp_path: Path) -> Iterator[Api]:
    """`rota serve`: read-only, no loop."""
    served = start_api(scheduler, tmp_path, read_only=True)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        served.server.stop()
