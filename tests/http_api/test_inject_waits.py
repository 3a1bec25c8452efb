"""`POST /v1/work/{id}/inject` to a parked attempt: the answer says whether the input wakes
it or is queued, and why (wait predicates, seed 001)."""

from __future__ import annotations

import re

import httpx

import rota
from http_api.conftest import Api

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def signed_in(api: Api) -> httpx.Client:
    """A browser-like client with a web session for the read token."""
    client = api.client(None, Origin=api.url)
    form = client.get("/ui/sign-in")
    csrf = CSRF.search(form.text)
    assert csrf is not None
    data = {"csrf": csrf.group(1), "token": api.tokens["read"], "next": "/ui/"}
    assert client.post("/ui/sign-in", data=data).status_code == 303
    return client


def park(scheduler: rota.Scheduler, work: str, wait: rota.WaitPredicate) -> None:
    scheduler.register("waiter", lambda ctx: None, replace=True)
    scheduler.submit(work, binding="waiter", input="start")
    lifecycle = scheduler.service.lifecycle
    (claimed,) = lifecycle.start_pass().claimed
    lifecycle.finish(claimed.attempt.execution_id, 1, rota.Result(outcome="waiting", wait=wait))


def test_inject_answers_queued_with_why_then_wake(idle_api: Api) -> None:
    park(idle_api.scheduler, "p", rota.KeyWait(key="approval"))
    client = idle_api.client("operate")
    queued = client.post("/v1/work/p/inject", json={"input": 1}, headers={"Idempotency-Key": "x"})
    assert queued.status_code == 200, queued.text
    answer = queued.json()["inject"]
    assert answer["delivery"] == "queued"
    assert answer["queued"] == "the wait is for input key 'approval', not 'x'"
    pending = queued.json()["work"]["pending"]
    assert [(p["key"], p["queued"]) for p in pending] == [("x", answer["queued"])]
    assert queued.json()["work"]["attempts"][0]["wait"]["kind"] == "key"
    woke = client.post(
        "/v1/work/p/inject", json={"input": 2}, headers={"Idempotency-Key": "approval"}
    )
    assert woke.json()["inject"] == {
        "work": "p",
        "key": "approval",
        "position": woke.json()["inject"]["position"],
        "delivery": "wake",
        "queued": None,
    }
    idle_api.scheduler.tick()
    view = idle_api.scheduler.work("p")
    assert view is not None
    assert view.attempts[0].segments[-1].wake == woke.json()["inject"]["position"]


def test_the_work_page_shows_the_wait_the_queued_input_and_the_wake(idle_api: Api) -> None:
    park(idle_api.scheduler, "p", rota.KeyWait(key="approval"))
    idle_api.scheduler.inject("p", 1, key="chatter")
    browser = signed_in(idle_api)
    page = browser.get("/ui/work/p")
    assert page.status_code == 200, page.text
    assert "<dt>waits for</dt><dd>input key &#39;approval&#39;</dd>" in page.text
    assert "<code>chatter</code> the wait is for input key &#39;approval&#39;" in page.text
    woke = idle_api.scheduler.inject("p", 2, key="approval")
    idle_api.scheduler.tick()
    page = browser.get("/ui/work/p")
    assert f"(woken by position {woke.position})" in page.text
