"""`POST /v1/works` to a binding known nowhere is refused at once (`409 unknown_binding`),
not accepted to wait for ever; one a daemon on the store has served is accepted."""

from __future__ import annotations

from http_api.conftest import Api


def test_a_submit_to_a_binding_known_nowhere_is_409_and_records_nothing(idle_api: Api) -> None:
    client = idle_api.client("operate")
    head = idle_api.head()
    body = {"work": "w", "binding": "typo"}
    refused = client.post("/v1/works", json=body, headers={"Idempotency-Key": "k1"})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "unknown_binding" and "no binding 'typo'" in error["message"]
    assert idle_api.head() == head
    idle_api.scheduler.service.lifecycle.record_served(["typo"])  # a daemon elsewhere runs it
    accepted = client.post("/v1/works", json=body, headers={"Idempotency-Key": "k2"})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["work"]["waiting"]["code"] == "unknown_binding"


def test_record_served_is_what_run_records_first(idle_api: Api) -> None:
    scheduler = idle_api.scheduler
    scheduler.register("later-served", lambda ctx: None)
    assert scheduler.record_served() >= 1  # its bindings, once per name ever
    head = scheduler.store.head()
    assert scheduler.record_served() == 0  # nothing new: nothing appended
    assert scheduler.store.head() == head
    assert scheduler.service.lifecycle.served("later-served")
