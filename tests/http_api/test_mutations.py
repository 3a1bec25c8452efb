"""The mutations through a real server: the Idempotency-Key as the delivery identity,
the token's name as who acted, repeats answered once, `rota serve` read-only."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from http_api.conftest import Api


def post(client: httpx.Client, path: str, body: Any, key: str) -> httpx.Response:
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def events_of(api: Api, work: str) -> list[dict[str, Any]]:
    return [e for e in api.scheduler.events() if e.stream == f"work/{work}"]


def test_submit_takes_the_key_as_its_input_key_and_a_repeat_is_a_no_op(idle_api: Api) -> None:
    client = idle_api.client("operate")
    body = {"work": "job", "binding": "echo", "input": {"n": 1}}
    first = post(client, "/v1/works", body, "order-7")
    assert first.status_code == 200, first.text
    assert first.json()["work"]["state"] == "ready"
    # (the Work's first input, carried by its definition under the input's identity)
    accepted = [e for e in events_of(idle_api, "job") if e.type == "core.work.submitted"]
    assert [e.delivery_id for e in accepted] == ["input/job/order-7"]
    head = idle_api.head()
    again = post(client, "/v1/works", body, "order-7")
    assert again.json() == first.json()
    assert idle_api.head() == head


def test_a_key_reused_for_another_request_is_422(idle_api: Api) -> None:
    client = idle_api.client("operate")
    post(client, "/v1/works", {"work": "a", "binding": "echo", "input": 1}, "k")
    post(client, "/v1/works", {"work": "b", "binding": "echo"}, "def-b")
    assert post(client, "/v1/work/a/cancel", {"reason": "r"}, "c").status_code == 200
    head = idle_api.head()
    for path, body, key in [
        ("/v1/works", {"work": "a", "binding": "echo", "input": 2}, "k"),  # another input
        ("/v1/work/a/inputs", {"input": 3}, "k"),
        ("/v1/work/b/cancel", {"reason": "r"}, "c"),  # another Work
        ("/v1/work/a/cancel", {"reason": "other"}, "c"),  # another reason
        ("/v1/work/a/retry", {}, "c"),  # another operation
        ("/v1/work/b/interrupt", {}, "c"),
    ]:
        reused = post(client, path, body, key)
        assert reused.status_code == 422, (path, reused.text)
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
        assert "'c'" in reused.text or "'k'" in reused.text
    assert idle_api.head() == head


def test_accept_and_inject_take_the_key_as_the_input_key(idle_api: Api) -> None:
    client = idle_api.client("operate")
    post(client, "/v1/works", {"work": "s", "binding": "echo", "kind": "standing"}, "def")
    answer = post(client, "/v1/work/s/inputs", {"input": {"x": 1}}, "in-1")
    assert answer.status_code == 200, answer.text
    ids = [e.delivery_id for e in events_of(idle_api, "s")]
    assert "input/s/in-1" in ids
    unknown = post(client, "/v1/work/nope/inputs", {"input": 1}, "in-2")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_work"
    no_attempt = post(client, "/v1/work/s/inject", {"input": 2}, "inj-1")
    assert no_attempt.status_code == 409  # nothing running to inject into
    assert no_attempt.json()["error"]["code"] == "no_live_attempt"


def test_cancel_records_the_token_name_as_who_acted(idle_api: Api) -> None:
    idle_api.scheduler.submit("c", binding="echo")
    answer = post(idle_api.client("operate"), "/v1/work/c/cancel", {"reason": "wrong"}, "x1")
    assert answer.status_code == 200 and answer.json()["work"]["state"] == "cancelled"
    (cancelled,) = [e for e in events_of(idle_api, "c") if e.type == "core.work.cancelled"]
    assert cancelled.data["by"] == "operate-token"
    assert cancelled.data["reason"] == "wrong"
    assert answer.json()["request"] == {
        "request_id": "x1",
        "type": "core.work.cancelled",
        "position": cancelled.position,
        "delivery_id": "request/x1",
        "repeated": False,
    }
    assert answer.json()["position"] == cancelled.position
    head = idle_api.head()
    repeat = post(idle_api.client("operate"), "/v1/work/c/cancel", {"reason": "wrong"}, "x1")
    assert repeat.status_code == 200 and idle_api.head() == head  # the first answer, again
    assert repeat.json()["request"] == {**answer.json()["request"], "repeated": True}
    assert repeat.json()["position"] == answer.json()["position"]


def test_retry_of_a_failed_work_is_requested_by_the_token(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.submit("f", binding="fail")
    s.run_until_idle(timeout=30)
    while s.work("f").state not in ("failed", "retry_wait"):  # type: ignore[union-attr]
        s.tick()
    answer = post(idle_api.client("operate"), "/v1/work/f/retry", {"reason": "fixed"}, "r1")
    assert answer.status_code == 200, answer.text
    (retry,) = [e for e in events_of(idle_api, "f") if e.type == "core.manual.retry"]
    assert retry.data["requested_by"] == "operate-token"


def test_settle_gate_needs_admin_and_releases_the_work(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.register_gate("approval", lambda work, binding, first: "approve me")
    s.submit("g", binding="echo")
    s.tick()
    body = {"registration": "approval", "admit": True, "reason": "ok"}
    operate = post(idle_api.client("operate"), "/v1/work/g/settle-gate", body, "s1")
    assert operate.status_code == 403
    admin = post(idle_api.client("admin"), "/v1/work/g/settle-gate", body, "s1")
    assert admin.status_code == 200, admin.text
    assert admin.json()["work"]["holds"] == []
    assert "core.gate.released" in [e.type for e in events_of(idle_api, "g")]
    release = post(idle_api.client("operate"), "/v1/work/g/release", {}, "s2")
    assert release.status_code == 409  # nothing held any more


def test_interrupt_fences_the_running_attempt(idle_api: Api) -> None:
    import threading

    gate = threading.Event()
    s = idle_api.scheduler
    s.register("block", lambda ctx: gate.wait(30) and {"ok": True})
    try:
        s.submit("b", binding="block")
        s.tick()
        injected = post(idle_api.client("operate"), "/v1/work/b/inject", {"input": 5}, "inj-9")
        assert injected.status_code == 200, injected.text
        assert "input/b/inj-9" in [e.delivery_id for e in events_of(idle_api, "b")]
        answer = post(idle_api.client("operate"), "/v1/work/b/interrupt", {}, "i1")
        assert answer.status_code == 200, answer.text
        (requested,) = [
            e
            for e in events_of(idle_api, "b")
            if e.type == "core.control.requested" and e.data["kind"] == "interrupt"
        ]
        assert requested.data["kind"] == "interrupt"
        assert requested.data["requested_by"] == "operate-token"
        assert answer.json()["work"]["state"] == "ready"  # fenced at once
    finally:
        gate.set()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/works", {"work": "ro", "binding": "echo"}),
        ("/v1/work/ro/cancel", {}),
        ("/v1/work/ro/settle-gate", {"registration": "g", "admit": False}),
    ],
)
def test_rota_serve_is_read_only(served: Api, path: str, body: Any) -> None:
    head = served.head()
    answer = post(served.client("admin"), path, body, "ro-1")
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "serve_read_only"
    assert served.head() == head
    assert served.client("read").get("/v1/works").status_code == 200
