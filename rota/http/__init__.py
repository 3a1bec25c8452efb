"""rota's HTTP API (the optional extra `rota[http]`): `rota serve` and `rota run --http`.

- `app.create_app(context)`: the FastAPI app; `context.ApiContext` is what routes reach;
- `routes/`: one module per resource (see its docstring for how to add one);
- `deps`: the bearer-token dependency with scopes (read < operate < admin);
- `tokens`: the token file (0600, digests only); `guard`: Host allow-list, body limit,
  JSON-only mutations; `errors`: `HttpCode`; `metrics`: the Prometheus collector;
- `server.HttpServer`: uvicorn on its own thread.

`serve(scheduler, ...)` composes them; this module itself imports nothing of the extra,
so `rota serve` without it can say what to install (`http_extra_missing`).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from rota.domain.errors import RotaError
from rota.http.errors import HttpCode

if TYPE_CHECKING:
    from rota.http.server import HttpServer
    from rota.scheduler import Scheduler

EXTRA = ("fastapi", "uvicorn", "prometheus_client", "jinja2")


def require_extra() -> None:
    """Refuse (`http_extra_missing`) when a package of `rota[http]` is not installed."""
    missing = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise RotaError(
            f"the HTTP API needs {', '.join(missing)}: install 'rota[http]'",
            code=HttpCode.HTTP_EXTRA_MISSING,
        )


def serve(
    scheduler: Scheduler,
    *,
    listen: str | None = None,
    tokens: str | None = None,
    read_only: bool = False,
) -> HttpServer:
    """Start the API over `scheduler` on `listen` (default: `[http] listen`), with the
    token file `tokens` (default: `[http] tokens`); returns the started server."""
    require_extra()
    from rota.http.app import create_app
    from rota.http.context import ApiContext
    from rota.http.metrics import registry
    from rota.http.server import HttpServer, listen_address
    from rota.http.tokens import TokenFile

    settings = scheduler.config.http
    address = listen or settings.listen
    host, port = listen_address(address)
    settings = settings.model_copy(update={"listen": address})
    context = ApiContext(
        scheduler=scheduler,
        tokens=TokenFile.load(tokens or settings.tokens),
        settings=settings,
        metrics=registry(
            scheduler, budget=settings.metrics_series_budget, scope_depth=settings.scope_depth
        ),
        read_only=read_only,
    )
    return HttpServer(create_app(context), host, port, closing=context.closing).start()


__all__ = ["HttpCode", "require_extra", "serve"]
