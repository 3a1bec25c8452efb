"""POST /v1/works with the flow-control fields (priority, keys, cost, throttle): recorded,
shown by GET /v1/work/{id} and the list, documented in the OpenAPI document, and a bad
value answered with 422 naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from http_api.conftest import Api

FLOW = {
    "priority": 5,
    "keys": ["tenant:acme", "resource:db"],
    "cost": 2,
    "throttle": {"key": "tenant:acme", "period": 60},
}


def post(client: httpx.Client, body: Any, key: str) -> httpx.Response:
    return client.post("/v1/works", json=body, headers={"Idempotency-Key": key})


def flow_of(work: dict[str, Any]) -> dict[str, Any]:
    return {k: work[k] for k in ("priority", "keys", "cost", "throttle")}


def test_submit_records_the_flow_fields_and_the_reads_show_them(idle_api: Api) -> None:
    client = idle_api.client("operate")
    answer = post(client, {"work": "w", "binding": "echo", **FLOW}, "k1")
    assert answer.status_code == 200, answer.text
    expected = {**FLOW, "throttle": {"key": "tenant:acme", "period": 60.0}}
    assert flow_of(answer.json()["work"]) == expected
    shown = client.get("/v1/work/w")
    assert shown.status_code == 200, shown.text
    assert flow_of(shown.json()["work"]) == expected
    (listed,) = client.get("/v1/works").json()["works"]
    assert flow_of(listed) == expected
    view = idle_api.scheduler.work("w")
    assert view is not None
    assert (view.priority, view.keys, view.cost) == (5, ("tenant:acme", "resource:db"), 2)


def test_a_submit_without_flow_fields_has_the_defaults(idle_api: Api) -> None:
    client = idle_api.client("operate")
    answer = post(client, {"work": "plain", "binding": "echo"}, "k2")
    assert flow_of(answer.json()["work"]) == {
        "priority": 0,
        "keys": [],
        "cost": 1,
        "throttle": None,
    }


@pytest.mark.parametrize(
    ("fields", "code", "names"),
    [
        ({"priority": 1001}, "invalid_request", "body.priority"),
        ({"priority": "5"}, "invalid_request", "body.priority"),
        ({"priority": 1.5}, "invalid_request", "body.priority"),
        ({"cost": 0}, "invalid_request", "body.cost"),
        ({"keys": ["bad key"]}, "invalid_request", "body.keys.0"),
        ({"keys": [f"k{n}" for n in range(9)]}, "invalid_request", "body.keys"),
        ({"keys": ["a", "a"]}, "invalid_flow", "keys ['a', 'a'] name one key twice"),
        ({"throttle": {"key": "t"}}, "invalid_request", "body.throttle.period"),
        ({"throttle": {"key": "t", "period": 0}}, "invalid_request", "body.throttle.period"),
        ({"throttle": {"key": "t", "period": "60"}}, "invalid_request", "body.throttle.period"),
        ({"throttle": {"key": "bad key", "period": 5}}, "invalid_request", "body.throttle.key"),
        ({"throttle": {"key": "t", "period": 5, "x": 1}}, "invalid_request", "body.throttle.x"),
    ],
)
def test_a_bad_flow_field_is_422_naming_it(
    idle_api: Api, fields: dict[str, Any], code: str, names: str
) -> None:
    client = idle_api.client("operate")
    head = idle_api.head()
    answer = post(client, {"work": "w", "binding": "echo", **fields}, "k3")
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == code
    assert names in error["message"]
    assert idle_api.head() == head


def test_the_openapi_document_describes_the_flow_fields(idle_api: Api) -> None:
    document = idle_api.client("read").get("/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    submit = schemas["SubmitBody"]["properties"]
    for name in ("priority", "keys", "cost", "throttle"):
        assert submit[name].get("description"), name
    assert (submit["priority"]["minimum"], submit["priority"]["maximum"]) == (-1000, 1000)
    assert submit["keys"]["maxItems"] == 8
    assert set(schemas["ThrottleBody"]["required"]) == {"key", "period"}
