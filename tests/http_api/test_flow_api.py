"""Flow control over HTTP: `/v1/pauses` (list, pause, resume) and a Work's priority, with
the operate scope for changes and read for the list, the Idempotency-Key as the request id,
and the domain's codes (`not_paused`, `invalid_flow`) as the error."""

from __future__ import annotations

from typing import Any

import httpx

from http_api.conftest import Api


def post(client: httpx.Client, path: str, body: Any, key: str) -> httpx.Response:
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def delete(client: httpx.Client, path: str, key: str) -> httpx.Response:
    return client.delete(path, headers={"Idempotency-Key": key})


def test_pause_list_and_resume_a_scope_by_its_path(idle_api: Api) -> None:
    operator, reader = idle_api.client("operate"), idle_api.client("read")
    assert reader.get("/v1/pauses").json() == {"paused": [], "position": None, "request": None}
    body = {"target": "scope", "name": "root/batch", "reason": "migration"}
    paused = post(operator, "/v1/pauses", body, "p-1")
    assert paused.status_code == 200, paused.text
    answer = paused.json()
    assert answer["request"]["type"] == "core.flow.paused"
    assert answer["request"]["delivery_id"] == "request/p-1"
    [view] = answer["paused"]
    assert (view["target"], view["name"], view["reason"]) == ("scope", "root/batch", "migration")
    assert view["by"] == "operate-token" and view["position"] == answer["position"]
    assert reader.get("/v1/pauses").json()["paused"] == [view]
    head = idle_api.head()
    assert post(operator, "/v1/pauses", body, "p-1").json() == {
        **answer,
        "request": {**answer["request"], "repeated": True},
    }
    assert idle_api.head() == head
    # A DELETE carries no body, so no Content-Type; a scope's slashes stay in the path.
    resumed = delete(operator, "/v1/pauses/scope/root/batch", "r-1")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["request"]["type"] == "core.flow.resumed"
    assert resumed.json()["paused"] == []
    again = delete(operator, "/v1/pauses/scope/root/batch", "r-2")
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_paused"


def test_a_paused_pool_holds_work_until_the_resume(idle_api: Api) -> None:
    s = idle_api.scheduler
    operator = idle_api.client("operate")
    body = {"target": "pool", "name": "agents", "reason": "upgrade"}
    assert post(operator, "/v1/pauses", body, "p").status_code == 200
    s.submit("w", binding="echo")
    s.tick()
    work = idle_api.client("read").get("/v1/work/w").json()["work"]
    assert work["state"] == "ready"
    assert work["waiting"] == {"code": "flow_paused", "detail": "pool agents is paused (upgrade)"}
    assert delete(operator, "/v1/pauses/pool/agents", "r").status_code == 200
    s.run_until_idle()
    assert s.work("w").state == "completed"  # type: ignore[union-attr]


def test_priority_is_recorded_once_under_the_key(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.submit("w", binding="echo")
    operator = idle_api.client("operate")
    answer = post(operator, "/v1/work/w/priority", {"priority": 7, "reason": "now"}, "k-1")
    assert answer.status_code == 200, answer.text
    request = answer.json()["request"]
    assert request["type"] == "core.work.reprioritized"
    assert answer.json()["position"] == request["position"]
    [event] = [e for e in s.events() if e.type == "core.work.reprioritized"]
    assert event.data["priority"] == 7 and event.data["by"] == "operate-token"
    assert event.delivery_id == "request/k-1"
    head = idle_api.head()
    assert post(operator, "/v1/work/w/priority", {"priority": 7, "reason": "now"}, "k-1").json()[
        "request"
    ] == {**request, "repeated": True}
    reused = post(operator, "/v1/work/w/priority", {"priority": 8}, "k-1")
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert idle_api.head() == head


def test_refusals_and_scopes(idle_api: Api) -> None:
    operator, reader = idle_api.client("operate"), idle_api.client("read")
    bad = post(operator, "/v1/pauses", {"target": "key", "name": "not a key"}, "b-1")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_flow"
    bad = post(operator, "/v1/pauses", {"target": "queue", "name": "jobs"}, "b-2")
    assert bad.status_code == 422
    far = post(operator, "/v1/work/nope/priority", {"priority": 1}, "b-3")
    assert far.status_code == 404 and far.json()["error"]["code"] == "unknown_work"
    idle_api.scheduler.submit("w", binding="echo")
    big = post(operator, "/v1/work/w/priority", {"priority": 5000}, "b-4")
    assert big.status_code == 422 and big.json()["error"]["code"] == "invalid_flow"
    # Changes need the operate scope; the list needs read.
    assert post(reader, "/v1/pauses", {"target": "pool", "name": "jobs"}, "b-5").status_code == 403
    assert delete(reader, "/v1/pauses/pool/jobs", "b-6").status_code == 403
    assert post(reader, "/v1/work/w/priority", {"priority": 1}, "b-7").status_code == 403
    assert idle_api.client(None).get("/v1/pauses").status_code == 401
    assert operator.delete("/v1/pauses/pool/jobs").json()["error"]["code"] == (
        "idempotency_key_required"
    )
    # Only a DELETE without a body skips the media type check: one with a form body is
    # refused before any route runs, as a POST is.
    formed = operator.request(
        "DELETE",
        "/v1/pauses/pool/jobs",
        content=b"a=1",
        headers={"Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "f"},
    )
    assert formed.status_code == 415


def test_rota_serve_lists_pauses_and_changes_none(served: Api) -> None:
    assert served.client("read").get("/v1/pauses").status_code == 200
    body = {"target": "pool", "name": "jobs"}
    refused = post(served.client("operate"), "/v1/pauses", body, "s-1")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "serve_read_only"
