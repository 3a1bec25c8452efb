"""The Idempotency-Key is recorded in the log (issue 28, item 7): a repeat sent to a new
server over the same store (a restart: no memory of answers) gets the first answer, read
back from the log, and appends nothing; the OpenAPI document says so on every mutation."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rota
from http_api.conftest import Api, echo, start_api


def opened(path: Path) -> rota.Scheduler:
    s = rota.open(path, owner="api-test")
    s.register("echo", echo)
    return s


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "api.db"


def served(s: rota.Scheduler, tmp_path: Path) -> Api:
    return start_api(s, tmp_path)


def stop(api: Api) -> None:
    for client in api.clients:
        client.close()
    api.server.stop()


def post(api: Api, path: str, body: Any, key: str, token: str = "operate") -> Any:
    answer = api.client(token).post(path, json=body, headers={"Idempotency-Key": key})
    assert answer.status_code == 200, answer.text
    return answer.json()


def answered(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without the Work's or schedule's view (that is the state now)."""
    return {k: v for k, v in answer.items() if k not in ("work", "schedule")}


@pytest.fixture
def first_process(path: Path, tmp_path: Path) -> Iterator[tuple[dict[str, Any], Any]]:
    gate = threading.Event()
    answers: dict[str, Any] = {}
    with opened(path) as s:
        s.register("block", lambda ctx: gate.wait(30) and None)
        s.schedule("nightly", binding="echo", cron="30 2 * * *")
        s.submit("c", binding="echo", input=1)
        s.submit("b", binding="block", kind="standing", input=0, input_key="0")
        s.tick()
        api = served(s, tmp_path)
        try:
            answers["cancel"] = post(api, "/v1/work/c/cancel", {"reason": "r"}, "cancel-c")
            answers["inject"] = post(api, "/v1/work/b/inject", {"input": 7}, "inject-b")
            answers["interrupt"] = post(api, "/v1/work/b/interrupt", {}, "interrupt-b")
            answers["trigger"] = post(api, "/v1/schedules/nightly/trigger", {}, "fire-1")
            answers["submit"] = post(
                api, "/v1/works", {"work": "n", "binding": "echo", "input": 2}, "submit-n"
            )
        finally:
            stop(api)
            gate.set()
            s.run_until_idle(timeout=30)
        yield answers, s.store.head()


def test_a_repeat_after_a_restart_gets_the_first_answer(
    first_process: tuple[dict[str, Any], Any], path: Path, tmp_path: Path
) -> None:
    answers, _ = first_process
    assert answers["cancel"]["request"]["delivery_id"] == "request/cancel-c"
    assert answers["inject"]["request"]["delivery_id"] == "input/b/inject-b"
    assert answers["interrupt"]["request"]["delivery_id"] == "request/interrupt-b"
    with opened(path) as s:
        head = s.store.head()
        api = served(s, tmp_path / "again")
        try:
            again = {
                "cancel": post(api, "/v1/work/c/cancel", {"reason": "r"}, "cancel-c"),
                "inject": post(api, "/v1/work/b/inject", {"input": 7}, "inject-b"),
                "interrupt": post(api, "/v1/work/b/interrupt", {}, "interrupt-b"),
                "trigger": post(api, "/v1/schedules/nightly/trigger", {}, "fire-1"),
                "submit": post(
                    api, "/v1/works", {"work": "n", "binding": "echo", "input": 2}, "submit-n"
                ),
            }
            reused = api.client("operate").post(
                "/v1/work/b/cancel", json={"reason": "r"}, headers={"Idempotency-Key": "cancel-c"}
            )
        finally:
            stop(api)
        assert s.store.head() == head  # nothing appended by any repeat
    for name in ("cancel", "inject", "interrupt"):
        first, repeat = answered(answers[name]), answered(again[name])
        assert repeat["request"] == {**first["request"], "repeated": True}, name
        assert repeat["position"] == first["position"], name
    assert answered(again["trigger"]) == {**answered(answers["trigger"]), "repeated": True}
    assert again["submit"]["position"] == answers["submit"]["position"]
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"


def test_the_openapi_document_describes_the_key_on_every_mutation(idle_api: Api) -> None:
    document = idle_api.client("read").get("/v1/openapi.json").json()
    posts = [(path, item["post"]) for path, item in document["paths"].items() if "post" in item]
    assert len(posts) >= 11
    for path, operation in posts:
        (header,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
        assert header["in"] == "header"
        text = header["description"]
        assert "[A-Za-z0-9._:@/-]{1,200}" in text, path
        assert "after a restart" in text and "idempotency_key_reused" in text, path
