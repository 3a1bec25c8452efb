"""The pages that point a person at what matters, in headless Chromium: the stderr tail of a
failed shell command, failed Work in Needs you (a click on Retry clears it), the Works list
by last activity and its id search, the event browser's pages, the auto-refresh switch
(clicked, no script), a schedule's Work linking to its schedule, and the charts drawn."""

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


def test_a_failed_work_s_page_shows_the_stderr_tail(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/work/migrate-db")
    card = browser.find_element(By.ID, "failure")
    assert card.find_element(By.CSS_SELECTOR, ".failure-code").text == "exit_3"
    tail = browser.find_element(By.ID, "stderr-tail")
    assert tail.is_displayed()
    assert tail.text.splitlines()[-1] == "migration 0042_orders_fk failed; rolled back"
    assert 'relation "orders_archive" does not exist' in tail.text
    # the failure card comes before the attempts, where the eye lands first
    attempts = browser.find_element(By.CSS_SELECTOR, "#timeline")
    assert card.location["y"] < attempts.location["y"]


def test_needs_you_lists_failed_work_and_retry_clears_it(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["operate"], then="/ui/")
    assert browser.find_element(By.CSS_SELECTOR, "#tile-needs-you .figure").text == "5"
    click_and_wait(browser, browser.find_element(By.ID, "tile-needs-you"))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.failed-row")
    assert {r.get_attribute("data-work") for r in rows} == {
        "migrate-db",
        "deploy-web",
        "ingest-feed",
    }
    row = browser.find_element(By.CSS_SELECTOR, "tr.failed-row[data-work='deploy-web']")
    assert "rollout_failed" in row.text and "retries exhausted (2 of 2)" in row.text
    click_and_wait(browser, row.find_element(By.CSS_SELECTOR, "button[data-action=retry]"))
    assert browser.current_url == f"{server}/ui/needs-you"
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.failed-row")
    assert {r.get_attribute("data-work") for r in rows} == {"migrate-db", "ingest-feed"}
    retried = [
        e for e in world.scheduler.events() if e.stream == "work/deploy-web" and "retr" in e.type
    ]
    assert retried


def test_works_by_activity_and_a_search(browser: Any, server: str, world: World) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/works")
    stamps = [
        c.get_attribute("data-at")
        for c in browser.find_elements(By.CSS_SELECTOR, "tr.work-row td.when[data-at]")
    ]
    assert stamps and stamps == sorted(stamps, reverse=True)  # latest activity first
    search = browser.find_element(By.ID, "work-search")
    search.send_keys("report")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.work-row")
    assert {r.get_attribute("data-work") for r in rows} == {
        "report-daily",
        "report-weekly",
        "report-monthly",
    }
    search = browser.find_element(By.ID, "work-search")
    search.clear()
    search.send_keys("sync-orders")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert browser.current_url == f"{server}/ui/work/sync-orders"


def test_the_event_browser_goes_back_a_page_at_a_time(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/")
    click_and_wait(browser, browser.find_element(By.ID, "all-events"))  # from the overview
    assert browser.current_url == f"{server}/ui/events"
    browser.get(f"{server}/ui/events?limit=20")
    head = world.scheduler.store.head().position

    def positions() -> list[int]:
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.event-row")
        return [int(r.get_attribute("data-position")) for r in rows]

    assert positions() == list(range(head, head - 20, -1))
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "nav.pager a[rel=next]"))
    assert positions() == list(range(head - 20, head - 40, -1))
    browser.find_element(By.ID, "event-type").send_keys("core.execution.failed")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    types = {
        r.get_attribute("data-type") for r in browser.find_elements(By.CSS_SELECTOR, "tr.event-row")
    }
    assert types == {"core.execution.failed"}


def test_auto_refresh_turns_off_with_a_click(browser: Any, server: str, world: World) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/")
    metas = browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
    assert [m.get_attribute("content") for m in metas] == ["30"]
    click_and_wait(browser, browser.find_element(By.ID, "refresh-off"))
    assert browser.current_url == f"{server}/ui/"
    assert not browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
    browser.get(f"{server}/ui/works")  # the choice holds on every page
    assert not browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
    click_and_wait(browser, browser.find_element(By.ID, "refresh-on"))
    assert browser.current_url == f"{server}/ui/works"
    assert browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")


def test_a_schedule_s_work_links_to_its_schedule(browser: Any, server: str, world: World) -> None:
    (work_id,) = [w.id for w in world.scheduler.works() if w.id.startswith("schedule.")]
    sign_in(browser, server, world.secrets["read"], then="/ui/works?q=schedule.")
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, work_id))
    nominal = browser.find_element(By.CSS_SELECTOR, "tr.fire-row a.nominal")
    assert nominal.text == "2026-11-03 09:14:32"
    click_and_wait(browser, nominal)
    assert browser.current_url == f"{server}/ui/schedules/hourly-sync#at-2026-11-03T09:14:32"
    row = browser.find_element(By.ID, "at-2026-11-03T09:14:32")
    assert "fired (manual)" in row.text and work_id in row.text


def test_the_charts_are_drawn(browser: Any, server: str, world: World) -> None:
    sign_in(browser, server, world.secrets["read"], then="/ui/charts")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert [c.get_attribute("data-chart") for c in charts] == ["throughput", "failures", "latency"]
    bars = browser.find_elements(By.CSS_SELECTOR, "svg[data-chart=throughput] rect.bar")
    tallest = max(bars, key=lambda b: int(b.get_attribute("data-value")))
    assert int(tallest.get_attribute("data-value")) > 0
    assert tallest.rect["height"] > 50  # drawn to scale, not a hairline
    points = browser.find_elements(By.CSS_SELECTOR, "svg[data-chart=latency] circle.point")
    assert {p.get_attribute("data-binding") for p in points} >= {"build", "migrate"}
