"""The OpenAPI document against the server: every route is in it, and every status a
route answers (to valid, invalid, unauthorised and forged requests, drawn by hypothesis)
is one the document lists for that route and method."""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from http_api.conftest import Api
from rota.http.app import OPENAPI_URL, create_app
from rota.http.routes import ROUTERS

WORKS = ["known", "gated", "nope", "nope", "bad id!", "x" * 200]  # nope: 404s drawn often
SCHEDULES = ["known", "known", "nope", "bad name!"]
TARGETS = ["pool", "key", "scope", "queue"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
PERSONAL = st.sampled_from([[], ["email"], ["a.b"], ["bad path!"], "email"])
BODIES = {
    "/v1/works": st.fixed_dictionaries(
        {"work": st.sampled_from(WORKS), "binding": st.sampled_from(["echo", "fail", "nope"])},
        optional={
            "input": JSON,
            "kind": st.sampled_from(["run-once", "standing", "other"]),
            "personal": PERSONAL,
        },
    ),
    "inputs": st.fixed_dictionaries({}, optional={"input": JSON, "personal": PERSONAL}),
    "forget": st.fixed_dictionaries({}, optional={"reason": st.text(max_size=5)}),
    "retry": st.fixed_dictionaries({}, optional={"reason": st.text(max_size=5)}),
    "cancel": st.fixed_dictionaries({}, optional={"reason": st.text(max_size=5)}),
    "release": st.fixed_dictionaries({}, optional={"kind": st.sampled_from(["budget", "gate"])}),
    "settle-gate": st.fixed_dictionaries(
        {"registration": st.sampled_from(["approval", "other"]), "admit": st.booleans()}
    ),
    "inject": st.fixed_dictionaries({"input": JSON}),
    "interrupt": st.just({}),
    "pause": st.fixed_dictionaries({}, optional={"reason": st.text(max_size=5)}),
    "resume": st.fixed_dictionaries({}, optional={"reason": st.text(max_size=5)}),
    "trigger": st.just({}),
    "priority": st.fixed_dictionaries(
        {"priority": st.integers(-2000, 2000)}, optional={"reason": st.text(max_size=5)}
    ),
    "/v1/pauses": st.fixed_dictionaries(
        {
            "target": st.sampled_from(["pool", "key", "scope", "queue"]),
            "name": st.sampled_from(["jobs", "tenant:acme", "root/a", "bad name!"]),
        },
        optional={"reason": st.text(max_size=5)},
    ),
}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


def app_routes(app: FastAPI) -> list[APIRoute]:
    """Every route of `app`, through the routers it includes (FastAPI keeps those lazily)."""
    found: list[APIRoute] = []
    pending: list[Any] = list(app.routes)
    while pending:
        route = pending.pop()
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):
            pending.extend(route.original_router.routes)
    return found


def test_every_route_is_in_the_document(idle_api: Api) -> None:
    document = idle_api.client("read").get(OPENAPI_URL).json()
    documented = {(p, m.upper()) for p, m, _ in operations(document)}
    routes = {
        (route.path_format, method)
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    assert routes and routes == documented
    # The app's other routes are deliberate: the document itself, and the web view under
    # /ui (HTML pages and forms, `include_in_schema=False`; test_security checks their
    # sign-in), which is no part of the API.
    others = {
        (route.path_format, method)
        for route in app_routes(create_app(idle_api.context))
        for method in route.methods
    } - documented
    assert {p for p, _ in others} - {OPENAPI_URL} == {p for p, _ in others if p.startswith("/ui")}
    assert any(p.startswith("/ui/schedules") for p, _ in others)
    for path, method, operation in operations(document):
        statuses = set(operation["responses"])
        assert {"200", "400", "401", "403", "500"} <= statuses, (path, method, statuses)
        if method == "post":
            assert {"409", "413", "415", "422"} <= statuses, (path, statuses)
            assert any(p["name"] == "Idempotency-Key" for p in operation["parameters"])


@st.composite
def requests(
    draw: st.DrawFn, api: Api, document: dict[str, Any]
) -> tuple[str, str, httpx.Response]:
    """A request to a documented operation, valid or not, sent; with its answer."""
    path, method, operation = draw(st.sampled_from(operations(document)))
    concrete = re.sub(r"\{work_id\}", lambda _: draw(st.sampled_from(WORKS)), path)
    concrete = re.sub(r"\{name\}", lambda _: draw(st.sampled_from(SCHEDULES)), concrete)
    concrete = re.sub(r"\{target\}", lambda _: draw(st.sampled_from(TARGETS)), concrete)
    headers: dict[str, str] = {}
    token = draw(st.sampled_from([None, "bogus", "read", "operate", "admin", "admin"]))
    if token is not None:
        headers["Authorization"] = f"Bearer {api.tokens.get(token, token)}"
    if draw(st.integers(0, 9)) == 0:
        headers["Host"] = "evil.example"
    params: dict[str, Any] = {}
    for parameter in operation.get("parameters", []):
        name, where = parameter["name"], parameter["in"]
        if name in ("follow", "accept", "last-event-id") or not draw(st.booleans()):
            continue  # a live tail never ends: not drawn here (test_reads covers it)
        value = draw(
            st.sampled_from(["0", "1", "16", "65", "-1", "x", "ready", "root", "echo", "known"])
        )
        if where == "query":
            params[name] = value
        elif where == "header":
            headers[name] = draw(st.sampled_from(["k-1", "k-2", "bad key", "known"]))
    kwargs: dict[str, Any] = {"headers": headers, "params": params}
    if method == "post":
        nested = "/work/" in concrete or "/schedules/" in concrete
        kind = concrete.rsplit("/", 1)[-1] if nested else path
        shape = draw(st.integers(0, 9))
        if shape == 0:
            kwargs["content"] = draw(st.sampled_from([b"{", b"", b"[1,", b"\xff"]))
            headers["Content-Type"] = "application/json"
        elif shape == 1:
            kwargs["content"] = b"work=x"
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif shape == 2:
            kwargs["json"] = draw(JSON)
        else:
            kwargs["json"] = draw(BODIES[kind])
    with httpx.Client(base_url=api.url, timeout=30) as client:
        answer = client.request(method.upper(), concrete, **kwargs)
    return path, method, answer


def test_every_status_a_route_answers_is_documented(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.register_gate(
        "approval", lambda work, binding, first: "approve" if work.work_id == "gated" else None
    )
    s.submit("known", binding="echo")
    s.submit("gated", binding="echo")
    s.schedule("known", binding="echo", every="1h")
    s.tick()
    document = idle_api.client("read").get(OPENAPI_URL).json()
    seen: set[int] = set()

    @settings(
        max_examples=250,
        deadline=None,
        derandomize=True,  # the same draws every run, so the coverage check below is stable
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.data())
    def check(data: st.DataObject) -> None:
        path, method, answer = data.draw(requests(idle_api, document))
        documented = document["paths"][path][method]["responses"]
        assert str(answer.status_code) in documented, (
            f"{method.upper()} {path} answered {answer.status_code}, documented: "
            f"{sorted(documented)}: {answer.text[:300]}"
        )
        if answer.status_code >= 400:
            assert isinstance(answer.json()["error"]["code"], str)
        seen.add(answer.status_code)

    check()
    # The draw reached the kinds of answer the corpus is about.
    assert {200, 400, 401, 403, 404, 415, 422} <= seen, seen
