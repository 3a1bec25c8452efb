"""`GET /v1/events?after=N`: the log after position N as JSON lines, or, asked for
`text/event-stream` (or with `follow=true`), a live tail by server-sent events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import anyio.to_thread
import msgspec
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from rota.http.context import ApiContext
from rota.http.deps import READ, context
from rota.http.models import READ as READ_ERRORS
from rota.http.models import documented

router = APIRouter(prefix="/v1", tags=["log"])
MAX_EVENTS = 10_000
TAIL_WAIT = 1.0  # seconds a tail waits for a commit before it looks whether to stop
KEEP_ALIVE = 15  # a keep-alive comment after this many waits without an event
NDJSON = "application/x-ndjson"
SSE = "text/event-stream"
MAX_POSITION = 2**63 - 1

EVENTS_RESPONSES = {
    **documented(*READ_ERRORS),
    200: {
        "description": "JSON lines (one event a line), or server-sent events (`id:` is the "
        "position; reconnect with Last-Event-ID)",
        "content": {NDJSON: {}, SSE: {}},
    },
}


@router.get("/events", response_class=Response, responses=EVENTS_RESPONSES, dependencies=[READ])
def events(
    request: Request,
    api: Annotated[ApiContext, Depends(context)],
    after: Annotated[int, Query(ge=0, le=MAX_POSITION)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS)] = 1000,
    follow: Annotated[bool, Query(description="a live tail (server-sent events)")] = False,
    accept: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> Response:
    """Events with position > `after` (at most `limit`), each with its position, stream,
    type, delivery identity, time and data."""
    if follow or SSE in (accept or ""):
        start = after
        if last_event_id is not None and last_event_id.isdigit():
            start = max(start, int(last_event_id))
        return StreamingResponse(
            _tail(request, api, start),
            media_type=SSE,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    lines = [msgspec.json.encode(e) + b"\n" for e in api.scheduler.events(after, limit)]
    return Response(b"".join(lines), media_type=NDJSON)


async def _tail(request: Request, api: ApiContext, after: int) -> AsyncIterator[bytes]:
    store = api.scheduler.store
    position = after
    quiet = 0
    yield b": rota events\n\n"
    while not api.closing.is_set() and not await request.is_disconnected():
        batch = await anyio.to_thread.run_sync(api.scheduler.events, position, 500)
        for event in batch:
            position = event.position
            data = msgspec.json.encode(event).decode()
            yield f"id: {position}\nevent: {event.type}\ndata: {data}\n\n".encode()
        if batch:
            quiet = 0
            continue
        if not await anyio.to_thread.run_sync(store.wait_for_commit, position, TAIL_WAIT):
            quiet += 1
            if quiet >= KEEP_ALIVE:
                quiet = 0
                yield b": keep-alive\n\n"
