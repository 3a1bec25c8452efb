"""The API's server: uvicorn on a thread of its own (`HttpServer`), used by `rota serve`
and `rota run --http ADDR`, and `listen_address` for the ADDR they take.

The server's event loop sleeps until a request or `stop()` (no periodic tick: the Date
header is off), so an idle API costs the daemon nothing it would notice. `start()`
returns once the socket listens (an Event, not a sleep); `port` is the bound port (ADDR
may ask for port 0).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading

import uvicorn
from fastapi import FastAPI

from rota.domain.errors import RotaError
from rota.http.context import ApiContext
from rota.http.errors import HttpCode

log = logging.getLogger(__name__)

DEFAULT_PORT = 8470
START_TIMEOUT = 10.0


def listen_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT` (host 127.0.0.1: loopback by default);
    anything else is `invalid_address`."""
    host, port = "127.0.0.1", text
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        host, port = inside, rest.removeprefix(":")
    elif ":" in text:
        host, _, port = text.rpartition(":")
        host = host or "127.0.0.1"
    bare_ipv6 = ":" in host and not text.startswith("[")
    if not port.isdigit() or not 0 <= int(port) <= 65535 or not host or bare_ipv6:
        raise RotaError(
            f"{text[:80]!r} is not HOST:PORT (a port from 0 to 65535)",
            code=HttpCode.INVALID_ADDRESS,
        )
    return host, int(port)


class _Server(uvicorn.Server):
    """uvicorn's server, told when it listens, and woken only to stop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.exit: asyncio.Event | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.exit = asyncio.Event()
        await super().startup(sockets)
        self.listening.set()

    async def main_loop(self) -> None:
        # uvicorn's own loop wakes ten times a second; this one sleeps until stop().
        assert self.exit is not None
        await self.exit.wait()

    def request_exit(self) -> None:
        self.should_exit = True
        if self.loop is not None and self.exit is not None:
            self.loop.call_soon_threadsafe(self.exit.set)


class HttpServer:
    """An app served on `host:port` by uvicorn on a daemon thread."""

    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        closing: threading.Event | None = None,
    ) -> None:
        self.closing = closing or threading.Event()
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            # uvicorn's records go to the root logger, so a command's handler writes them in
            # its format (JSON under `--log-format json`), not uvicorn's own handlers.
            log_config=None,
            access_log=False,
            lifespan="off",
            date_header=False,
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        self.app = app
        self.server = _Server(config)
        self.thread = threading.Thread(target=self._run, name="rota-http", daemon=True)
        self.failure: BaseException | None = None
        self.socket: socket.socket | None = None

    def _bind(self) -> socket.socket:
        """The listening socket, bound here rather than by uvicorn (which logs a failure and
        exits): a port in use is `address_in_use`, any other failure `invalid_address`."""
        config = self.server.config
        sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((config.host, config.port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise RotaError(
                    f"{self.address} is in use by another process: stop it or choose another "
                    "port (--http ADDR, [http] listen)",
                    code=HttpCode.ADDRESS_IN_USE,
                ) from None
            raise RotaError(
                f"the HTTP API could not listen on {self.address}: {exc.strerror or exc}",
                code=HttpCode.INVALID_ADDRESS,
            ) from None
        return sock

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.socket] if self.socket is not None else None)
        except BaseException as exc:  # reported by start()
            self.failure = exc
        finally:
            self.server.listening.set()

    def start(self, timeout: float = START_TIMEOUT) -> HttpServer:
        self.socket = self._bind()
        self.thread.start()
        self.server.listening.wait(timeout)
        if self.failure is not None or not self.server.started:
            reason = f": {self.failure}" if self.failure else ""
            raise RotaError(
                f"the HTTP API could not listen on {self.address}{reason}",
                code=HttpCode.INVALID_ADDRESS,
            )
        self._count_works()
        return self

    def _count_works(self) -> None:
        """Count every Work for the overview, `/v1/holds` and `/metrics` now, on a thread of
        its own, so that the first of them does not wait for it (`rota.application.tallies`)."""
        context: ApiContext = self.app.state.rota  # set by `create_app`
        service = context.scheduler.service

        def count() -> None:
            try:
                service.tallies.ready()
            except Exception as exc:  # the first request that needs the counts counts again
                log.warning("counting the Works for the HTTP views failed: %s", type(exc).__name__)

        threading.Thread(target=count, name="rota-tally", daemon=True).start()

    @property
    def port(self) -> int:
        for server in self.server.servers:
            for sock in server.sockets:
                port: int = sock.getsockname()[1]
                return port
        return self.server.config.port

    @property
    def address(self) -> str:
        host = self.server.config.host
        shown = f"[{host}]" if ":" in host else host
        return f"{shown}:{self.port if self.server.started else self.server.config.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop: live tails end first (`closing`), then uvicorn closes its connections."""
        self.closing.set()
        self.server.request_exit()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
