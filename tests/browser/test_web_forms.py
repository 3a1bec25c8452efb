"""The web view's session and forms over plain HTTP (no browser needed): what is refused,
with which code, and that a refused form changes nothing in the log.

A real server on loopback (uvicorn, as `rota run --http`), an httpx client as the browser.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from rota.http.server import HttpServer

from .world import World, serve

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, follow_redirects=False, timeout=10)


def signed_in(url: str, token: str) -> tuple[httpx.Client, str]:
    """A client with a session for `token`, and the CSRF token of its forms."""
    c = client(url)
    form = c.get("/ui/sign-in")
    csrf = CSRF.search(form.text)
    assert csrf is not None
    answer = c.post(
        "/ui/sign-in",
        data={"csrf": csrf.group(1), "token": token, "next": "/ui/needs-you"},
        headers={"Origin": url},
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/needs-you"
    page = c.get("/ui/needs-you")
    found = CSRF.search(page.text)
    assert found is not None
    return c, found.group(1)


def head(world: World) -> int:
    return world.scheduler.store.head().position


def released(world: World, work: str = "etl-extra") -> list[dict[str, Any]]:
    return [
        e
        for e in world.scheduler.events()
        if e.type == "core.work.released" and e.stream == f"work/{work}"
    ]


def error_code(page: httpx.Response) -> str:
    found = re.search(r"rota: <code>([a-z_]+)</code>:", page.text)
    assert found is not None, page.text
    return found.group(1)


def test_pages_need_a_session_and_actions_refuse_without_one(server: str, world: World) -> None:
    c = client(server)
    for path in ("/ui/", "/ui/needs-you", "/ui/works", "/ui/work/sync-orders", "/ui/audit"):
        answer = c.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/ui/sign-in?next=")
    before = head(world)
    answer = c.post("/ui/work/etl-extra/release", data={"csrf": "x", "kind": "budget"})
    assert answer.status_code == 401 and error_code(answer) == "sign_in_required"
    assert head(world) == before


def test_a_form_without_or_with_a_wrong_csrf_token_is_refused(server: str, world: World) -> None:
    c, csrf = signed_in(server, world.secrets["operate"])
    _, other_csrf = signed_in(server, world.secrets["admin"])
    assert other_csrf != csrf
    before = head(world)
    for data in (
        {"kind": "budget"},  # none
        {"kind": "budget", "csrf": ""},
        {"kind": "budget", "csrf": other_csrf},  # another session's
        {"kind": "budget", "csrf": csrf[:-2] + "AA"},
    ):
        answer = c.post("/ui/work/etl-extra/release", data=data)
        assert answer.status_code == 403, data
        assert error_code(answer) == "csrf_invalid"
    # the right token, from another origin (a page elsewhere posting here)
    answer = c.post(
        "/ui/work/etl-extra/release",
        data={"kind": "budget", "csrf": csrf},
        headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert answer.status_code == 403 and error_code(answer) == "csrf_invalid"
    assert head(world) == before and released(world) == []
    # the control: the same form, as the page sends it, is done
    answer = c.post(
        "/ui/work/etl-extra/release",
        data={"kind": "budget", "csrf": csrf, "next": "/ui/needs-you"},
        headers={"Origin": server},
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/needs-you"
    assert len(released(world)) == 1


def test_sign_in_needs_its_own_csrf_cookie(server: str, world: World) -> None:
    c = client(server)
    answer = c.post("/ui/sign-in", data={"token": world.secrets["admin"], "csrf": "guess"})
    assert answer.status_code == 403 and error_code(answer) == "csrf_invalid"
    assert "rota_session" not in answer.headers.get("set-cookie", "")


def test_scopes_decide_what_a_session_may_do(server: str, world: World) -> None:
    reader, csrf = signed_in(server, world.secrets["read"])
    page = reader.get("/ui/needs-you").text
    assert "data-action" not in page and 'class="inline action"' not in page
    before = head(world)
    answer = reader.post("/ui/work/etl-extra/release", data={"csrf": csrf, "kind": "budget"})
    assert answer.status_code == 403 and error_code(answer) == "missing_scope"
    operator, csrf = signed_in(server, world.secrets["operate"])
    page = operator.get("/ui/needs-you").text
    assert 'data-action="release"' in page and 'data-action="admit"' not in page
    answer = operator.post(
        "/ui/work/release-2.4/settle-gate",
        data={"csrf": csrf, "registration": "change-approval", "decision": "admit"},
    )
    assert answer.status_code == 403 and error_code(answer) == "missing_scope"
    assert head(world) == before


def test_a_refused_command_comes_back_as_a_notice(server: str, world: World) -> None:
    c, csrf = signed_in(server, world.secrets["operate"])
    answer = c.post(
        "/ui/work/release-2.4/release",  # a gate's hold is not released, it is settled
        data={"csrf": csrf, "next": "/ui/work/release-2.4"},
    )
    assert answer.status_code == 303
    page = c.get(answer.headers["location"]).text
    assert 'class="notice notice-refused"' in page and "gate_hold:" in page
    assert "notice-refused" not in c.get("/ui/work/release-2.4").text  # shown once


def test_the_session_cookie_is_signed_and_holds_no_token(
    server: str, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    c, _ = signed_in(server, world.secrets["admin"])
    cookie = c.cookies["rota_session"]
    assert world.secrets["admin"] not in cookie
    assert world.secrets["admin"] not in caplog.text
    answer = c.get("/ui/")
    assert answer.status_code == 200
    policy = answer.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy
    assert answer.headers["x-frame-options"] == "DENY"
    # a cookie naming another token, with this one's signature, is no session
    operator, _ = signed_in(server, world.secrets["operate"])
    payload, _, mac = operator.cookies["rota_session"].partition(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["n"] == "ops-alice"
    claims["n"] = "root-bob"
    raised = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    forged = client(server)
    forged.cookies.set("rota_session", f"{raised}.{mac}", path="/ui")
    assert forged.get("/ui/").status_code == 303
    forged.cookies.set("rota_session", f"{payload}.{mac}", path="/ui")
    assert forged.get("/ui/").status_code == 200  # the control: the genuine cookie works
    # removing the token from the file ends its sessions
    world.tokens.remove("root-bob")
    assert c.get("/ui/").status_code == 303


def listed(page: str) -> list[str]:
    """The Works a Works page lists, in its order."""
    return [unquote(w) for w in re.findall(r'<td><a href="/ui/work/([^"]+)">', page)]


def test_works_filter_and_pages(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    held = c.get("/ui/works", params={"state": "held", "sort": "id"}).text
    assert listed(held) == ["etl-extra", "release-2.4"]
    seen: list[str] = []
    after = ""
    for _ in range(10):
        page = c.get("/ui/works", params={"limit": 4, "after": after, "sort": "id"}).text
        seen += listed(page)
        following = re.search(r'rel="next" href="[^"]*after=([^"]+)"', page)
        if following is None:
            break
        after = unquote(following.group(1))
    assert seen == sorted(w.id for w in world.scheduler.works())
    scoped = c.get("/ui/works", params={"scope": "root/etl", "sort": "id"}).text
    assert listed(scoped) == [
        "etl-extra",
        "etl-night",
        "index-rebuild",
        "schedule.hourly-sync@noop",
        "sync-orders",
    ]


def test_schedules_list_the_facade_s_schedules_and_an_unknown_one_is_a_404(
    server: str, world: World
) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    page = c.get("/ui/schedules").text
    assert "nightly-etl" in page and "hourly-sync" in page
    assert "2026-11-03 09:05:00: paused" in page and "2026-11-04 01:00:00" in page
    assert "data-action" not in page  # a read session gets no buttons
    answer = c.get("/ui/schedules/no-such")
    assert answer.status_code == 404 and error_code(answer) == "unknown_schedule"


def test_a_schedule_form_without_operate_or_csrf_changes_nothing(server: str, world: World) -> None:
    before = head(world)
    c, csrf = signed_in(server, world.secrets["read"])
    answer = c.post("/ui/schedules/nightly-etl/pause", data={"csrf": csrf})
    assert answer.status_code == 403 and error_code(answer) == "missing_scope"
    c, csrf = signed_in(server, world.secrets["operate"])
    answer = c.post("/ui/schedules/nightly-etl/pause", data={"csrf": "forged"})
    assert answer.status_code == 403 and error_code(answer) == "csrf_invalid"
    assert head(world) == before
    answer = c.post("/ui/schedules/nightly-etl/pause", data={"csrf": csrf, "next": "/ui/schedules"})
    assert answer.status_code == 303 and head(world) > before


def test_an_unknown_work_is_an_html_404(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    answer = c.get("/ui/work/no-such-work")
    assert answer.status_code == 404 and error_code(answer) == "unknown_work"
    assert answer.headers["content-type"].startswith("text/html")


@pytest.fixture
def read_only_server(world: World) -> Iterator[str]:
    running: HttpServer = serve(world, read_only=True)
    try:
        yield running.url
    finally:
        running.stop()


def test_rota_serve_shows_no_action_and_refuses_forms(read_only_server: str, world: World) -> None:
    c, csrf = signed_in(read_only_server, world.secrets["admin"])
    page = c.get("/ui/needs-you").text
    assert "read-only server" in page and "data-action" not in page
    before = head(world)
    answer = c.post("/ui/work/etl-extra/release", data={"csrf": csrf, "kind": "budget"})
    assert answer.status_code == 403 and error_code(answer) == "serve_read_only"
    assert head(world) == before
