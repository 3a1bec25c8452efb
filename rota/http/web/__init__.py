"""The web view: server-rendered pages under `/ui`, served by the API's own process.

`mount(app)` adds its pages (`pages`; the event browser, charts and auto-refresh switch:
`browse`) and forms (`actions`) to the API's app and
draws the key that signs its sessions (`session`). The pages read the same read models
as the API's routes (`views`); a Work's attempt timeline is laid out by
`timeline`; the templates are in `rota/http/web/templates/`, the stylesheet in
`rota/http/web/static/`. No script, no build step: every page works without JavaScript.
"""

from __future__ import annotations

from fastapi import FastAPI

from rota.http.context import ApiContext
from rota.http.web import actions, browse, pages
from rota.http.web.render import WebState
from rota.http.web.session import Sessions


def mount(app: FastAPI) -> None:
    """Serve the web view from `app` (whose `state.rota` is the `ApiContext`)."""
    context: ApiContext = app.state.rota
    app.state.web = WebState(sessions=Sessions(tokens=context.tokens))
    app.include_router(pages.router)
    app.include_router(actions.router)
    app.include_router(browse.router)
