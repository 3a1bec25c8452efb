"""The API's routes, one module per resource; each module's `router` is an `APIRouter`.

A new resource is a new module here, added to `ROUTERS`. A route takes the `ApiContext`
(`Depends(context)`) and the token (`READ`, `OPERATE` or `ADMIN` from `rota.http.deps`,
which checks the scope before the route runs) and documents every status it can answer
(`responses=documented(...)` from `rota.http.models`); a test holds the OpenAPI document
to that. Schedules (`schedules.py`) and the web view (`rota.http.web`) come later.
"""

from __future__ import annotations

from fastapi import APIRouter

from rota.http.routes import events, flow, health, metrics, mutations, schedules, system, works

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    works.router,
    system.router,
    events.router,
    mutations.router,
    schedules.router,
    flow.router,
    metrics.router,
)
