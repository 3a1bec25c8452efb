"""The ASGI guard in front of every route: the Host allow-list (DNS rebinding), the body
size limit and JSON-only mutations under /v1, each refused with a JSON error before any
route (or token check) runs. There is no CORS middleware: no cross-origin header is ever
sent, so a browser page of another origin cannot read an answer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.domain.errors import RotaError
from rota.domain.results import check_unicode
from rota.http.errors import HttpCode, status_of

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
NOSNIFF = (b"x-content-type-options", b"nosniff")


# A JSON escape of a UTF-16 surrogate: only a body holding one is parsed here.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

# host[:port]: a bracketed IPv6 literal, or a DNS name / IPv4 address (letters, digits,
# dots and hyphens), then an optional port of digits; nothing else (no userinfo, no path).
_HOST = re.compile(
    r"(?:\[(?P<ip6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?))"
    r"(?::(?P<port>[0-9]{1,5}))?",
    re.ASCII,
)


def host_name(header: str) -> str:
    """The host of a Host header, without its port: `[::1]:80` -> `::1`; `""` when the
    whole header is not `host[:port]` (`[::1].evil.com`, `localhost:1@evil.com`, a port
    over 65535), which no allow-list holds."""
    found = _HOST.fullmatch(header.strip().lower())
    if found is None:
        return ""
    port = found["port"]
    if port is not None and int(port) > 65535:
        return ""
    return found["ip6"] or found["name"]


def error_message(status: int, code: str, message: str) -> tuple[int, bytes]:
    body = {"error": {"code": code, "message": message}}
    return status, json.dumps(body).encode()


async def answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Guard:
    """Refuses what no route may see; buffers a mutating body (at most `max_body` bytes)."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str], max_body: int) -> None:
        self.app = app
        self.allowed = LOOPBACK_HOSTS | {h.lower() for h in allowed_hosts}
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _nosniff(send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await answer(send, *refusal)
            return
        if scope["method"] not in MUTATING:
            await self.app(scope, receive, send)
            return
        body = await self._body(receive)
        if body is None:
            await answer(
                send,
                *error_message(
                    413,
                    HttpCode.BODY_TOO_LARGE,
                    f"the request body is over {self.max_body} bytes",
                ),
            )
            return
        refusal = _lone_surrogate(body)
        if refusal is not None:
            await answer(send, *refusal)
            return
        await self.app(scope, _replay(body, receive), send)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, bytes] | None:
        host = host_name(headers.get("host", ""))
        if host not in self.allowed:
            return error_message(
                400,
                HttpCode.HOST_NOT_ALLOWED,
                f"Host {host[:80]!r} is not allowed (add it to [http] allowed_hosts)",
            )
        if scope["method"] not in MUTATING:
            return None
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return error_message(
                413, HttpCode.BODY_TOO_LARGE, f"the request body is over {self.max_body} bytes"
            )
        path: str = scope["path"]
        media = headers.get("content-type", "").partition(";")[0].strip().lower()
        # A DELETE without a body (`DELETE /v1/pauses/...`) has no media type to check; a
        # cross-origin DELETE is never a simple request, so a browser preflights it.
        bodiless = scope["method"] == "DELETE" and length in (None, "0")
        if path.startswith("/v1/") and media != "application/json" and not bodiless:
            return error_message(
                415,
                HttpCode.UNSUPPORTED_MEDIA_TYPE,
                "a mutating request's body is JSON: send Content-Type: application/json",
            )
        return None

    async def _body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _lone_surrogate(body: bytes) -> tuple[int, bytes] | None:
    """The refusal (`not_json`) of a JSON body holding a lone surrogate anywhere (`"\\ud800"`,
    valid JSON that no UTF-8 store can hold); None for any other body (the route parses
    it, and refuses one that is not JSON)."""
    if _SURROGATE_ESCAPE.search(body) is None:
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    try:
        check_unicode(value, "the request body")
    except RotaError as exc:
        return error_message(status_of(exc), exc.code, str(exc))
    return None


def _replay(body: bytes, upstream: Receive) -> Receive:
    """The buffered body as one message, then the client's own messages (its disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            message: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
            return message
        return await upstream()

    return receive


def _nosniff(send: Send) -> Send:
    """`send` adding `X-Content-Type-Options: nosniff` to every response it starts (so a
    browser never sniffs a JSON answer, an error included, into HTML)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [h for h in message.get("headers", []) if h[0].lower() != NOSNIFF[0]]
            message = {**message, "headers": [*headers, NOSNIFF]}
        await send(message)

    return sending
