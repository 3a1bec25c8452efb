"""`GET /metrics`: Prometheus text, computed from the projections at scrape time
(`rota.http.metrics`), so the values are right after a restart."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rota.http.context import ApiContext
from rota.http.deps import READ, context
from rota.http.models import GUARDED, documented

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        **documented(*GUARDED),
        200: {"description": "Prometheus text", "content": {CONTENT_TYPE_LATEST: {}}},
    },
    dependencies=[READ],
)
def metrics(api: Annotated[ApiContext, Depends(context)]) -> Response:
    """Every series of docs/http.md's metrics table, at most `[http] metrics_series_budget`."""
    return Response(generate_latest(api.metrics), media_type=CONTENT_TYPE_LATEST)
