"""The web view: server-rendered pages under `/ui`, served by the API's own process.

`mount(app)` adds its pages (`web_pages`) and forms (`web_actions`) to the API's app and
draws the key that signs its sessions (`web_session`). The pages read the same read models
as the API's routes (`web_views`); a Work's attempt timeline is laid out by
`web_timeline`; the templates are in `rota/http/templates/`, the stylesheet in
`rota/http/static/`. No script, no build step: every page works without JavaScript.
"""

from __future__ import annotations

from fastapi import FastAPI

from rota.http import web_actions, web_pages
from rota.http.context import ApiContext
from rota.http.web_render import WebState
from rota.http.web_session import Sessions


def mount(app: FastAPI) -> None:
    """Serve the web view from `app` (whose `state.rota` is the `ApiContext`)."""
    context: ApiContext = app.state.rota
    app.state.web = WebState(sessions=Sessions(tokens=context.tokens))
    app.include_router(web_pages.router)
    app.include_router(web_actions.router)
