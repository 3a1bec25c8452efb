"""The place for `GET /v1/schedules`, `GET /v1/schedules/{name}` and the schedule
mutations (pause, resume, trigger), which come with the schedules issue.

Add the routes to `router` below as the other modules do: reads with `READ` and
`documented(*READ)`, mutations through `rota.http.routes.mutations._mutate` (an
`Idempotency-Key`, the token's name as who acted) with `documented(*MUTATION)`.
"""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1", tags=["schedules"])
