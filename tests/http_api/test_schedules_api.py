"""The schedule routes through a real server, on an injected clock: the list (paged) and
the detail (definition, next fires with DST flags, history with fired and skipped times
and their reasons), pause and resume by the token's name, a trigger whose Idempotency-Key
is its fire's delivery identity, scopes, and `rota serve` read-only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import rota
from http_api.conftest import Api, echo
from rota.infrastructure.clock import ManualClock

START = datetime(2026, 10, 24, 9, 0, tzinfo=UTC)  # the Saturday before Berlin leaves DST


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def scheduler(tmp_path: Path, clock: ManualClock) -> Iterator[rota.Scheduler]:
    with rota.open(tmp_path / "api.db", clock=clock, owner="api-test") as s:
        s.register("echo", echo)
        s.schedule("every-5m", binding="echo", every="5m")
        s.schedule("nightly", binding="echo", cron="30 2 * * *", timezone="Europe/Berlin")
        s.schedule("paused", binding="echo", every="1m")
        s.schedules.pause("paused", actor="setup", reason="vendor down")
        clock.advance(300)  # 09:05: every-5m fires, paused skips five minutes
        s.tick()
        yield s


def post(client: httpx.Client, path: str, body: Any, key: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post(path, json=body, headers=headers)


def schedule_events(api: Api, name: str, kind: str) -> list[Any]:
    return [e for e in api.scheduler.events() if e.stream == f"schedule/{name}" and e.type == kind]


def test_the_list_is_paged_by_name(idle_api: Api) -> None:
    client = idle_api.client("read")
    everything = client.get("/v1/schedules").json()
    assert [s["name"] for s in everything["schedules"]] == ["every-5m", "nightly", "paused"]
    assert everything["next"] is None
    states = {s["name"]: s["state"] for s in everything["schedules"]}
    assert states == {"every-5m": "active", "nightly": "active", "paused": "paused"}
    first = client.get("/v1/schedules", params={"limit": 2}).json()
    assert [s["name"] for s in first["schedules"]] == ["every-5m", "nightly"]
    assert first["next"] == "nightly"
    rest = client.get("/v1/schedules", params={"limit": 2, "after": first["next"]}).json()
    assert [s["name"] for s in rest["schedules"]] == ["paused"] and rest["next"] is None
    assert client.get("/v1/schedules", params={"limit": 65}).status_code == 422


def test_the_detail_has_next_fires_with_dst_flags_and_history_with_reasons(
    idle_api: Api,
) -> None:
    client = idle_api.client("read")
    nightly = client.get("/v1/schedules/nightly").json()
    assert nightly["schedule"]["spec"] == "30 2 * * *" and nightly["schedule"]["version"] == 1
    assert nightly["release"] is None
    times = [(n["local"], n["dst"]) for n in nightly["next"][:2]]
    # 2026-10-25 02:30 Berlin is ambiguous (the clocks go back): flagged
    assert times[0][0].startswith("2026-10-25T02:30:00") and times[0][1] is not None
    assert times[1] == ("2026-10-26T02:30:00+01:00", None)
    fired = client.get("/v1/schedules/every-5m").json()
    (entry,) = fired["history"]
    assert entry["status"] == "fired" and entry["nominal"] == "2026-10-24T09:05:00Z"
    assert entry["work"] and entry["position"] > 0
    paused = client.get("/v1/schedules/paused").json()
    assert paused["schedule"]["state"] == "paused"
    skipped = [h for h in paused["history"] if h["status"] == "skipped"]
    assert skipped and {h["reason"] for h in skipped} == {"paused"}
    missing = client.get("/v1/schedules/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_schedule"
    assert client.get("/v1/schedules/bad name!").status_code == 422


def test_pause_and_resume_record_the_token_name_and_a_repeat_is_answered_once(
    idle_api: Api,
) -> None:
    client = idle_api.client("operate")
    paused = post(client, "/v1/schedules/nightly/pause", {"reason": "maintenance"}, "p-1")
    assert paused.status_code == 200, paused.text
    assert paused.json()["schedule"]["state"] == "paused"
    (event,) = schedule_events(idle_api, "nightly", "core.schedule.paused")
    assert event.data["actor"] == "operate-token" and event.data["reason"] == "maintenance"
    head = idle_api.head()
    assert post(client, "/v1/schedules/nightly/pause", {"reason": "maintenance"}, "p-1").json() == (
        paused.json()
    )
    assert idle_api.head() == head
    again = post(client, "/v1/schedules/nightly/pause", {}, "p-2")
    assert again.status_code == 200  # already paused: a no-op in the domain, nothing appended
    assert idle_api.head() == head
    resumed = post(client, "/v1/schedules/nightly/resume", {}, "r-1")
    assert resumed.status_code == 200 and resumed.json()["schedule"]["state"] == "active"
    (event,) = schedule_events(idle_api, "nightly", "core.schedule.resumed")
    assert event.data["actor"] == "operate-token"


def test_a_trigger_s_key_is_its_fire_s_delivery_identity(idle_api: Api) -> None:
    client = idle_api.client("operate")
    first = post(client, "/v1/schedules/nightly/trigger", {}, "deploy-42")
    assert first.status_code == 200, first.text
    assert first.json()["fired"] == "schedule/nightly/manual/deploy-42"
    (fired,) = schedule_events(idle_api, "nightly", "core.schedule.fired")
    assert fired.delivery_id == "schedule/nightly/manual/deploy-42" and fired.data["manual"]
    assert fired.data["actor"] == "operate-token"  # the token's name: who triggered it
    head = idle_api.head()
    repeat = post(client, "/v1/schedules/nightly/trigger", {}, "deploy-42")
    assert repeat.status_code == 200 and repeat.json()["repeated"]
    # the first fire, read back from the log (no memory of answers): nothing fired twice
    assert repeat.json()["fired"] == first.json()["fired"]
    assert repeat.json()["position"] == first.json()["position"] == fired.position
    assert idle_api.head() == head
    other = post(idle_api.client("admin"), "/v1/schedules/nightly/trigger", {}, "deploy-42")
    assert other.status_code == 422  # another actor: another request
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert idle_api.head() == head


@pytest.mark.parametrize(
    ("token", "path", "body", "key", "status", "code"),
    [
        ("read", "/v1/schedules/nightly/pause", {}, "k", 403, "missing_scope"),
        ("read", "/v1/schedules/nightly/trigger", {}, "k", 403, "missing_scope"),
        ("bogus", "/v1/schedules/nightly/resume", {}, "k", 401, "unauthorized"),
        (None, "/v1/schedules", None, None, 401, "unauthorized"),
        ("operate", "/v1/schedules/nightly/pause", {}, None, 400, "idempotency_key_required"),
        ("operate", "/v1/schedules/nightly/pause", {"why": 1}, "k", 422, "invalid_request"),
        ("operate", "/v1/schedules/nightly/trigger", {"input": 1}, "k", 422, "invalid_request"),
        ("operate", "/v1/schedules/nightly/pause", {"reason": "x" * 1001}, "k", 422, None),
        ("operate", "/v1/schedules/nope/pause", {}, "k", 404, "unknown_schedule"),
        ("operate", "/v1/schedules/nightly/pause", {}, "bad key", 422, "invalid_request"),
    ],
)
def test_the_schedule_routes_refuse_and_change_nothing(
    idle_api: Api,
    token: str | None,
    path: str,
    body: Any,
    key: str | None,
    status: int,
    code: str | None,
) -> None:
    head = idle_api.head()
    client = idle_api.client(token)
    answer = client.get(path) if body is None else post(client, path, body, key)
    assert answer.status_code == status, answer.text
    if code is not None:
        assert answer.json()["error"]["code"] == code
    assert idle_api.head() == head


def test_a_malformed_or_non_json_body_is_refused(idle_api: Api) -> None:
    client = idle_api.client("operate")
    head = idle_api.head()
    headers = {"Idempotency-Key": "m", "Content-Type": "application/json"}
    broken = client.post("/v1/schedules/nightly/pause", content=b"{", headers=headers)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "malformed_body"
    form = client.post(
        "/v1/schedules/nightly/pause",
        content=b"reason=x",
        headers={"Idempotency-Key": "m", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 415
    assert idle_api.head() == head


def test_serve_reads_schedules_and_refuses_their_mutations(served: Api) -> None:
    client = served.client("admin")
    assert client.get("/v1/schedules/nightly").status_code == 200
    head = served.head()
    for action in ("pause", "resume", "trigger"):
        answer = post(client, f"/v1/schedules/nightly/{action}", {}, "k")
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "serve_read_only"
    assert served.head() == head
