"""Personal input fields and `forget` over HTTP: the `personal` field of a submit seals the
marked values before the append (a repeat with the same Idempotency-Key is still a no-op),
no answer shows them, and `POST /v1/work/{id}/forget` (operate scope) forgets once."""

from __future__ import annotations

from typing import Any

import httpx

from http_api.conftest import Api

CANARY = "canary-51aa0f-lin@example.org"


def post(client: httpx.Client, path: str, body: Any, key: str) -> httpx.Response:
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def test_personal_fields_are_sealed_and_forget_records_once(idle_api: Api) -> None:
    client = idle_api.client("operate")
    body = {"work": "job", "binding": "echo", "input": {"email": CANARY}, "personal": ["email"]}
    first = post(client, "/v1/works", body, "order-1")
    assert first.status_code == 200, first.text
    head = idle_api.head()
    assert post(client, "/v1/works", body, "order-1").json() == first.json()
    assert idle_api.head() == head  # the same sealed event: a repeat appends nothing
    events = client.get("/v1/events").text
    assert "$personal" in events and CANARY not in events and CANARY not in first.text
    reader = idle_api.client("read")
    assert post(reader, "/v1/work/job/forget", {"reason": "r"}, "f-1").status_code == 403
    forgot = post(client, "/v1/work/job/forget", {"reason": "erasure 3"}, "f-1")
    assert forgot.status_code == 200, forgot.text
    again = post(client, "/v1/work/job/forget", {"reason": "again"}, "f-2")
    assert again.json()["position"] == forgot.json()["position"]
    recorded = [e for e in idle_api.scheduler.events() if e.type == "core.work.forgotten"]
    assert len(recorded) == 1 and recorded[0].data["by"] == "operate-token"
    missing = post(client, "/v1/work/nobody/forget", {}, "f-3")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_work"
    refused = post(
        client, "/v1/work/job/inputs", {"input": {"email": 1}, "personal": ["email"]}, "i"
    )
    assert refused.status_code == 409, refused.text


def test_a_personal_path_into_a_list_payload_is_422_without_the_value(idle_api: Api) -> None:
    client = idle_api.client("operate")
    body = {"work": "l", "binding": "echo", "input": [CANARY], "personal": ["email"]}
    refused = post(client, "/v1/works", body, "l-1")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_personal"
    assert CANARY not in refused.text
