"""The web view in headless Chromium: real sign-in, real clicks, and the log as the proof.

- Needs you lists the budget hold and the gate hold; clicking Release clears the budget
  hold, and the log records `core.work.released` by the token's name; an admin's Admit
  settles the gate (`core.gate.released`).
- The timeline of a recovered attempt draws the 90 s it held no lease as a gap, and the
  relaunched one its 15 s.
- A read token sees no action button anywhere; a form without its CSRF token is refused
  and changes nothing.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

try:
    from selenium.webdriver.common.by import By
except ImportError:  # pragma: no cover - selenium is in requirements.lock
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("!!! BROWSER TESTS NOT RUN: selenium is not installed !!!", allow_module_level=True)

from .chromium import click_and_wait, sign_in
from .world import World

pytestmark = pytest.mark.slow


def events_of(world: World, work: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in world.scheduler.events() if e.type == kind and e.stream == f"work/{work}"]


def hold_rows(browser: Any) -> dict[str, str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.hold-row")
    return {r.get_attribute("data-work"): r.get_attribute("data-kind") for r in rows}


def test_needs_you_lists_both_holds_and_a_click_releases_the_budget_hold(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["operate"], then="/ui/needs-you")
    assert browser.current_url == f"{server}/ui/needs-you"
    assert hold_rows(browser) == {"etl-extra": "budget", "release-2.4": "gate"}
    budget = browser.find_element(By.CSS_SELECTOR, "tr.hold-row[data-kind=budget]")
    assert "budget nightly reached: 3 of 3 attempts" in budget.text
    gate = browser.find_element(By.CSS_SELECTOR, "tr.hold-row[data-kind=gate]")
    assert "production changes need a second pair of eyes" in gate.text
    # operate may release; settling a gate takes admin, so no Admit button here
    assert not gate.find_elements(By.CSS_SELECTOR, "button")
    assert "settle the gate change-approval (admin)" in gate.text
    assert events_of(world, "etl-extra", "core.work.released") == []

    click_and_wait(browser, budget.find_element(By.CSS_SELECTOR, "button[data-action=release]"))

    assert browser.current_url == f"{server}/ui/needs-you"  # posted, then redirected back
    notice = browser.find_element(By.CSS_SELECTOR, ".notice-done")
    assert notice.text == "released the budget hold of etl-extra"
    assert hold_rows(browser) == {"release-2.4": "gate"}
    (released,) = events_of(world, "etl-extra", "core.work.released")
    assert released.data["kind"] == "budget"
    assert released.data["released_by"] == "ops-alice"
    assert world.scheduler.work("etl-extra").holds == ()  # type: ignore[union-attr]
    # a second view of the page shows the notice no more
    browser.refresh()
    assert not browser.find_elements(By.CSS_SELECTOR, ".notice")


def test_an_admin_admits_the_gate_hold_from_the_work_page(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["admin"], then="/ui/work/release-2.4")
    hold = browser.find_element(By.CSS_SELECTOR, ".hold-row[data-kind=gate]")
    assert events_of(world, "release-2.4", "core.gate.released") == []
    click_and_wait(browser, hold.find_element(By.CSS_SELECTOR, "button[data-action=admit]"))
    assert browser.current_url == f"{server}/ui/work/release-2.4"
    assert (
        "admitted release-2.4 at gate change-approval"
        in browser.find_element(By.CSS_SELECTOR, ".notice-done").text
    )
    (admitted,) = events_of(world, "release-2.4", "core.gate.released")
    assert admitted.data["registration"] == "change-approval"
    assert not browser.find_elements(By.CSS_SELECTOR, ".hold-row")


def test_the_timeline_of_a_recovered_attempt_shows_its_gap(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/work/sync-orders")
    row = browser.find_element(By.CSS_SELECTOR, "#timeline g.attempt-row[data-attempt='1']")
    (gap,) = row.find_elements(By.CSS_SELECTOR, "rect.gap")
    assert gap.get_attribute("data-kind") == "recovered"
    assert gap.get_attribute("data-epoch") == "1"
    assert float(gap.get_attribute("data-seconds")) == 90.0  # lease lapsed 09:02:00, 09:03:30
    assert gap.get_attribute("data-started") == "2026-11-03T09:02:00.000000Z"
    assert gap.get_attribute("data-ended") == "2026-11-03T09:03:30.000000Z"
    start = row.find_element(By.CSS_SELECTOR, "rect.segment-start")
    recovered = row.find_element(By.CSS_SELECTOR, "rect.segment-recovered")
    # drawn: the gap sits between the two segments, and is wide (90 of 190 s)
    assert start.rect["x"] + start.rect["width"] == pytest.approx(gap.rect["x"], abs=1.5)
    assert gap.rect["x"] + gap.rect["width"] == pytest.approx(recovered.rect["x"], abs=1.5)
    assert gap.rect["width"] > 0.4 * row.rect["width"] * 0.8
    mark = row.find_element(By.CSS_SELECTOR, "g.mark-recovered")
    assert mark.get_attribute("data-kind") == "recovered"
    assert row.find_elements(By.CSS_SELECTOR, "g.mark-completed")
    # the same, in words, for a reader without the picture
    assert "no lease for 90 s" in browser.find_element(By.CSS_SELECTOR, "tr.gap-row").text

    browser.get(f"{server}/ui/work/index-rebuild")
    (gap,) = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.gap")
    assert gap.get_attribute("data-kind") == "relaunched"
    assert float(gap.get_attribute("data-seconds")) == 15.0
    assert browser.find_elements(By.CSS_SELECTOR, "#timeline g.mark-relaunched")

    # a host that died: 40 s without a lease, then recovery records the attempt lost
    browser.get(f"{server}/ui/work/ingest-feed")
    (gap,) = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.gap")
    assert float(gap.get_attribute("data-seconds")) == 40.0
    assert browser.find_elements(By.CSS_SELECTOR, "#timeline g.mark-lost")
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#timeline .mark-label")]
    assert labels == ["recovered · lost"]  # two marks at one instant share one label


def test_launch_phases_are_drawn_under_their_segment(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/work/build-1842")
    phases = browser.find_elements(By.CSS_SELECTOR, "#timeline g.phase")
    names = [p.get_attribute("data-phase") for p in phases]
    assert names == ["toolbelt", "secrets", "environment", "executor"]
    assert {p.get_attribute("data-outcome") for p in phases} == {"ok"}
    assert not browser.find_elements(By.CSS_SELECTOR, "#timeline rect.gap")


def test_a_read_token_sees_no_action_button(browser: Any, server: str, world: World) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/needs-you")
    assert hold_rows(browser) == {"etl-extra": "budget", "release-2.4": "gate"}
    for path in (
        "/ui/needs-you",
        "/ui/work/etl-extra",
        "/ui/work/release-2.4",
        "/ui/work/deploy-web",
        "/ui/schedules",
        "/ui/schedules/nightly-etl",
    ):
        browser.get(server + path)
        assert browser.find_elements(By.CSS_SELECTOR, "h1")
        assert not browser.find_elements(By.CSS_SELECTOR, "[data-action]"), path
        assert not browser.find_elements(By.CSS_SELECTOR, "form.action"), path
    # the only form a read session gets is signing out
    forms = browser.find_elements(By.CSS_SELECTOR, "form[method=post]")
    assert [f.get_attribute("action") for f in forms] == [f"{server}/ui/sign-out"]


def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["operate"], then="/ui/needs-you")
    head = world.scheduler.store.head().position
    form = browser.find_element(By.CSS_SELECTOR, "tr.hold-row[data-kind=budget] form.action")
    # as a forged page would send it: the same form without the token
    browser.execute_script("arguments[0].querySelector('input[name=csrf]').remove()", form)
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "rota: csrf_invalid:" in browser.find_element(By.CSS_SELECTOR, ".error").text
    assert world.scheduler.store.head().position == head
    assert events_of(world, "etl-extra", "core.work.released") == []
    browser.get(f"{server}/ui/needs-you")
    assert hold_rows(browser) == {"etl-extra": "budget", "release-2.4": "gate"}


def test_a_page_without_a_session_goes_to_sign_in_and_back(
    browser: Any, server: str, world: World
) -> None:
    browser.get(f"{server}/ui/capacity")
    assert browser.current_url.startswith(f"{server}/ui/sign-in?next=")
    browser.find_element(By.ID, "token").send_keys("rota_not-a-token")
    click_and_wait(
        browser, browser.find_element(By.CSS_SELECTOR, "form[action='/ui/sign-in'] button")
    )
    assert "sign_in_failed" in browser.find_element(By.CSS_SELECTOR, ".error").text
    browser.find_element(By.ID, "token").send_keys(world.secrets["read"])
    click_and_wait(
        browser, browser.find_element(By.CSS_SELECTOR, "form[action='/ui/sign-in'] button")
    )
    assert browser.current_url == f"{server}/ui/capacity"
    pools = {
        r.get_attribute("data-pool"): r.text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-pool]")
    }
    assert "jobs" in pools and "1" in pools["jobs"]
    # waiting is the daemon's last start pass; the dry run is its own column and list.
    headers = [h.text.lower() for h in browser.find_elements(By.CSS_SELECTOR, "table.pools th")]
    assert "would wait now" in " ".join(headers).replace("\n", " ")
    assert "Would wait now (dry run)" in browser.page_source
    cookies = {c["name"]: c for c in browser.get_cookies()}
    session = cookies["rota_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert world.secrets["read"] not in session["value"]
