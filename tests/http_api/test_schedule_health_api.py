"""Issue 28 item 1: a stuck schedule is flagged through a real server by `/readyz` (503
`not_ready` naming it), `/metrics` (`rota_schedules_unhealthy{status="stuck"}`) and the
Schedules page (its health flag and reason), the same read doctor's `schedule_health` makes."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from browser.test_web_forms import signed_in

import rota
from http_api.conftest import start_api
from rota.infrastructure.clock import ManualClock
from rota.replay.doctor import doctor

START = datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC)


def _gauge(text: str, status: str) -> float:
    found = re.search(rf'^rota_schedules_unhealthy\{{status="{status}"\}} (\S+)$', text, re.M)
    assert found is not None, text
    return float(found.group(1))


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_stuck_schedule_is_flagged_by_readyz_metrics_and_the_page(
    tmp_path: Path, gate: threading.Event
) -> None:
    clock = ManualClock(START)
    with rota.open(tmp_path / "h.db", clock=clock, owner="api-test") as s:
        s.register("slow", lambda ctx: gate.wait(60))
        s.schedule("tick", binding="slow", every="1m")
        served = start_api(s, tmp_path)
        try:
            client = served.client("read")
            browser, _ = signed_in(served.url, served.tokens["read"])
            served.clients.append(browser)
            clock.advance(30)
            s.tick()  # 09:01 fires; its run does not end
            assert client.get("/readyz").status_code == 200
            text = client.get("/metrics").text
            assert (_gauge(text, "stuck"), _gauge(text, "quarantined")) == (0, 0)
            page = browser.get("/ui/schedules").text
            assert 'data-schedule="tick"' in page and "data-health" not in page
            for _ in range(3):
                clock.advance(60)
                s.tick()  # three overlaps in a row
            (health,) = s.queries.schedules.health()
            assert health.status == "stuck" and health.reason is not None
            answer = client.get("/readyz")
            assert answer.status_code == 503
            error = answer.json()["error"]
            assert error["code"] == "not_ready"
            assert error["message"] == f"schedule_health: tick stuck ({health.reason})"
            assert _gauge(client.get("/metrics").text, "stuck") == 1
            page = browser.get("/ui/schedules").text
            flag = re.search(r'data-health="stuck".*?</div>', page, re.S)
            assert flag is not None and health.reason in flag.group(0)
            check = doctor(str(s.store.url)).check("schedule_health")
            assert check.detail == f"tick stuck ({health.reason})"  # doctor agrees
        finally:
            gate.set()
            for c in served.clients:
                c.close()
            served.server.stop()


@pytest.mark.parametrize("how", ["web", "api"])
def test_cancel_of_a_schedule_work_then_ten_nominal_times_page_and_doctor_agree(
    tmp_path: Path, how: str
) -> None:
    """The web view's Cancel button (or `POST /v1/work/{id}/cancel`) on the schedule's
    Work, then ten nominal times: each fired and ran; the page, `/readyz`, the metric and
    doctor all say the schedule is healthy."""
    clock = ManualClock(START)
    with rota.open(tmp_path / "c.db", clock=clock, owner="api-test") as s:
        s.register("job", lambda ctx: None)
        s.schedule("tick", binding="job", every="1m")
        served = start_api(s, tmp_path)
        try:
            client = served.client("operate")
            browser, csrf = signed_in(served.url, served.tokens["operate"])
            served.clients.append(browser)
            clock.advance(30)
            s.run_until_idle(timeout=30)  # 09:01 fired and ran
            work = "schedule.tick@job"
            if how == "web":
                answer = browser.post(
                    f"/ui/work/{work}/cancel", data={"csrf": csrf, "next": "/ui/schedules"}
                )
                assert answer.status_code == 303, answer.text
            else:
                answer = client.post(
                    f"/v1/work/{work}/cancel",
                    json={"reason": "ops"},
                    headers={"Idempotency-Key": "cancel-1"},
                )
                assert answer.status_code < 300, answer.text
            assert s.work(work).state == "cancelled"
            for _ in range(10):
                clock.advance(60)
                s.run_until_idle(timeout=30)
            detail = client.get("/v1/schedules/tick").json()
            history = detail["history"][-10:]
            assert [(h["status"], h.get("outcome")) for h in history] == [
                ("fired", "completed")
            ] * 10
            assert {h["work"] for h in history} == {f"{work}:run2"}
            page = browser.get("/ui/schedules").text
            assert 'data-schedule="tick"' in page and "data-health" not in page
            assert client.get("/readyz").status_code == 200
            assert _gauge(client.get("/metrics").text, "stuck") == 0
            report = doctor(str(s.store.url))
            assert report.check("schedule_health").status == "ok"
            assert report.check("schedule_accounting").status == "ok"
        finally:
            for c in served.clients:
                c.close()
            served.server.stop()
