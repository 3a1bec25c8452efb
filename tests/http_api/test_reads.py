"""The read routes through httpx against a real server on loopback."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

import rota
from http_api.conftest import Api, start_api


def test_healthz_and_readyz_answer_while_the_loop_ticks(api: Api) -> None:
    client = api.client("read")
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ok"


def test_healthz_is_503_when_the_loop_is_not_running(idle_api: Api) -> None:
    answer = idle_api.client("read").get("/healthz")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "unhealthy"


def test_works_pages_by_id_with_limit_plus_one(idle_api: Api) -> None:
    s = idle_api.scheduler
    for i in range(40):
        s.submit(f"w{i:02d}", binding="echo", scope="root/team" if i % 2 else "root")
    client = idle_api.client("read")
    first = client.get("/v1/works").json()  # default 16
    assert [w["id"] for w in first["works"]] == [f"w{i:02d}" for i in range(16)]
    assert first["next"] == "w15"
    seen, after = [], None
    while True:
        params = {"limit": 7} | ({"after": after} if after else {})
        page = client.get("/v1/works", params=params).json()
        seen += [w["id"] for w in page["works"]]
        after = page["next"]
        if after is None:
            break
    assert seen == [f"w{i:02d}" for i in range(40)]
    exact = client.get("/v1/works", params={"limit": 40}).json()
    assert len(exact["works"]) == 40 and exact["next"] is None  # no more: null, not an id
    assert client.get("/v1/works", params={"limit": 65}).status_code == 422  # hard cap 64


def test_works_filter_by_state_scope_and_binding(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.submit("a", binding="echo", scope="root/team")
    s.submit("b", binding="fail", scope="root/team/x")
    s.submit("c", binding="echo", scope="root/other")
    s.cancel("c")
    client = idle_api.client("read")

    def ids(**params: str) -> list[str]:
        return [w["id"] for w in client.get("/v1/works", params=params).json()["works"]]

    assert ids(scope="root/team") == ["a", "b"]
    assert ids(scope="root/tea") == []  # a scope, not a prefix of its name
    assert ids(binding="echo") == ["a", "c"]
    assert ids(state="cancelled") == ["c"]
    assert ids(state="ready", binding="fail") == ["b"]
    bad = client.get("/v1/works", params={"state": "sleeping"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"


def test_work_detail_has_attempts_segments_phases_holds_and_explain(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.submit("done", binding="echo", input={"n": 1})
    s.run_until_idle(timeout=30)
    detail = idle_api.client("read").get("/v1/work/done").json()
    work = detail["work"]
    assert work["state"] == "completed"
    (attempt,) = work["attempts"]
    assert attempt["outcome"] == "completed"
    assert attempt["segments"] and "phases" in attempt["segments"][0]
    assert work["holds"] == [] and work["waiting"] is None
    assert detail["explain"]["state"] == "completed"
    assert any(st["kind"] == "completed" for st in detail["explain"]["statements"])
    missing = idle_api.client("read").get("/v1/work/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_work"


def test_work_detail_carries_the_waiting_annotation_and_hold_kind(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.register_gate("approval", lambda work, binding, first: "a person must approve")
    s.submit("gated", binding="echo")
    s.tick()
    work = idle_api.client("read").get("/v1/work/gated").json()["work"]
    assert work["state"] == "held"
    assert [(h["kind"], h["holder"]) for h in work["holds"]] == [("gate", "approval")]
    holds = idle_api.client("read").get("/v1/holds").json()["holds"]
    assert [(h["work"], h["kind"]) for h in holds] == [("gated", "gate")]
    assert holds[0]["reason"] == "a person must approve"
    assert "settle-gate" in holds[0]["clears"]


def test_capacity_in_use_from_storage_and_waiting_from_the_last_pass(tmp_path: Path) -> None:
    release = threading.Event()

    def slow(ctx: object) -> dict[str, bool]:
        release.wait(30)
        return {"ok": True}

    with rota.open(tmp_path / "c.db", config={"settings": {"concurrency": 1}}) as s:
        s.register("slow", slow)
        served = start_api(s, tmp_path)
        try:
            s.submit("one", binding="slow")
            s.submit("two", binding="slow")
            client = served.client("read")
            before = client.get("/v1/capacity").json()
            assert before["waiting_from"] == "last_pass"
            assert before["pools"]["agents"]["waiting"] == 0  # no start pass yet
            assert before["waiting"] == []
            # The dry run is a separate field: a pass now would start one and hold the
            # other back for the one slot.
            assert before["pools"]["agents"]["preview"] == 1
            assert [w["work"] for w in before["preview"]] == ["two"]
            s.tick()
            after = client.get("/v1/capacity").json()
            assert after["pools"]["agents"] == {
                "limit": 1,
                "in_use": 1,
                "waiting": 1,
                "preview": 1,
            }
            assert [w["work"] for w in after["waiting"]] == ["two"]
        finally:
            release.set()
            served.server.stop()
            s.run_until_idle(timeout=30)


def test_capacity_shows_keys_buckets_and_pauses(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from rota.application.ports.records import NewEvent
    from rota.domain.events.flow import FlowPaused
    from rota.infrastructure.clock import ManualClock

    release = threading.Event()

    def slow(ctx: object) -> dict[str, bool]:
        release.wait(30)
        return {"ok": True}

    config = {
        "keys": [{"key": "tenant:*", "concurrency": 1}],
        "rates": [{"key": "pool:agents", "rate": "60/min", "burst": 3}],
    }
    clock = ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))
    with rota.open(tmp_path / "k.db", config=config, clock=clock) as s:
        s.register("slow", slow)
        served = start_api(s, tmp_path)
        try:
            s.submit("one", binding="slow", keys=["tenant:acme"])
            s.submit("two", binding="slow", keys=["tenant:acme"])
            s.store.append([NewEvent("flow/pauses", FlowPaused(target="scope", name="root/x"))])
            s.tick()
            view = served.client("read").get("/v1/capacity").json()
            assert view["keys"] == {
                "tenant:acme": {"limit": 1, "in_use": 1, "waiting": 1, "preview": 1}
            }
            assert view["buckets"] == {
                "pool:agents": {
                    "rule": "pool:agents",
                    "rate": "60/min",
                    "burst": 3,
                    "tokens": 2.0,
                    "next_token": "2026-11-02T10:00:01.000000Z",
                }
            }
            assert view["paused"] == [{"target": "scope", "name": "root/x", "reason": ""}]
            assert [(w["work"], w["code"]) for w in view["waiting"]] == [("two", "capacity_key")]
        finally:
            release.set()
            served.server.stop()
            s.run_until_idle(timeout=30)


def test_serve_runs_no_start_pass_so_waiting_is_empty_and_the_dry_run_is_the_preview(
    served: Api,
) -> None:
    served.scheduler.submit("x", binding="echo")
    view = served.client("read").get("/v1/capacity").json()
    assert view["waiting_from"] == "none"
    assert view["waiting"] == [] and all(p["waiting"] == 0 for p in view["pools"].values())
    assert isinstance(view["preview"], list)


def test_scheduler_state_reports_the_loop_leases_and_lag(api: Api) -> None:
    view = api.client("read").get("/v1/scheduler").json()
    assert view["loop"] == "running"
    assert view["owner"] == "api-test"
    assert view["lag"] == 0 and view["position"] == view["applied"]
    assert view["leases_held"] == []


def test_audit_head_is_the_log_head(idle_api: Api) -> None:
    idle_api.scheduler.submit("h", binding="echo")
    view = idle_api.client("read").get("/v1/audit/head").json()
    head = idle_api.head()
    assert (view["position"], view["hash"]) == (head.position, head.hash)
    assert view["checkpoint"] is None  # no [audit] checkpoint_dir


def test_events_as_json_lines_after_a_position(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.submit("d", binding="echo", input={"k": 0})
    after = idle_api.head().position
    s.submit("e", binding="echo", input={"k": 1})
    answer = idle_api.client("read").get("/v1/events", params={"after": after})
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert [e["position"] for e in lines] == list(range(after + 1, idle_api.head().position + 1))
    # (e's definition, carrying its first input under the input's identity)
    assert lines[0]["delivery_id"] == "input/e/" + lines[0]["data"]["input"]["key"]


def test_events_live_tail_by_server_sent_events(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.submit("first", binding="echo")
    start = idle_api.head().position
    client = idle_api.client("read")
    with client.stream(
        "GET", "/v1/events", params={"after": start}, headers={"Accept": "text/event-stream"}
    ) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines) == ": rota events"
        s.submit("second", binding="echo")  # committed after the tail began
        got: dict[str, str] = {}
        for line in lines:
            if line.startswith(("id: ", "event: ", "data: ")):
                name, _, value = line.partition(": ")
                got[name] = value
            if "data" in got:
                break
    assert int(got["id"]) == start + 1
    assert got["event"] == "core.work.submitted"
    assert json.loads(got["data"])["data"]["work_id"] == "second"


@pytest.mark.parametrize("path", ["/v1/openapi.json"])
def test_the_openapi_document_is_published(idle_api: Api, path: str) -> None:
    document = idle_api.client("read").get(path).json()
    assert "/v1/work/{work_id}" in document["paths"]
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert httpx.get(idle_api.url + path).status_code == 401  # it needs a token too


def test_readyz_is_503_when_a_fast_doctor_check_fails(tmp_path: Path) -> None:
    """A checkpoint ahead of the log (its tail was lost) fails doctor's checkpoint check."""
    from rota.replay.checkpoint import Checkpoint, write_file

    checkpoints = tmp_path / "checkpoints"
    config = {"audit": {"checkpoint_dir": str(checkpoints)}}
    with rota.open(tmp_path / "r.db", config=config) as s:
        s.register("echo", lambda ctx: None)
        s.submit("w", binding="echo")
        served = start_api(s, tmp_path)
        try:
            client = served.client("read")
            assert client.get("/readyz").status_code == 200
            head = s.store.head()
            write_file(
                checkpoints,
                Checkpoint(s.store.store_id, head.position + 5, "f" * 64, "2026-12-01T00:00:00Z"),
            )
            answer = client.get("/readyz")
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "not_ready"
            assert "checkpoint" in answer.json()["error"]["message"]
        finally:
            served.server.stop()


def test_healthz_is_503_once_the_loop_missed_three_cadences(idle_api: Api) -> None:
    """The pass record as a loop that stalled leaves it (no waiting: its clock is set)."""
    import time

    daemon = idle_api.scheduler.daemon
    client = idle_api.client("read")
    daemon.running = True
    try:
        daemon.passes.last_at = time.monotonic() - 14.0  # within 3 x 5 s
        assert client.get("/healthz").status_code == 200
        daemon.passes.last_at = time.monotonic() - 16.0
        answer = client.get("/healthz")
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "unhealthy"
    finally:
        daemon.running = False
