"""The Schedules pages in headless Chromium, over the demo world's two schedules: the list
shows the paused one's skipped time with its reason and the active one's next fire; a
click on Pause records `core.schedule.paused` by the token's name; the detail page shows
the next fires and the history; Trigger now fires once, however often its form is sent."""

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


def schedule_events(world: World, name: str, kind: str) -> list[Any]:
    return [
        e for e in world.scheduler.events() if e.type == kind and e.stream == f"schedule/{name}"
    ]


def row(browser: Any, name: str) -> Any:
    return browser.find_element(By.CSS_SELECTOR, f"tr[data-schedule='{name}']")


def test_the_list_shows_a_skip_and_its_reason_and_pause_is_recorded_by_the_token(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["operate"], then="/ui/schedules")
    assert browser.current_url == f"{server}/ui/schedules"
    paused = row(browser, "hourly-sync")
    assert "paused" in paused.text
    assert "2026-11-03 09:05:00: paused" in paused.find_element(By.CSS_SELECTOR, ".skip").text
    nightly = row(browser, "nightly-etl")
    assert "active" in nightly.text and "2026-11-04 01:00:00" in nightly.text  # 02:00 Berlin
    assert schedule_events(world, "nightly-etl", "core.schedule.paused") == []

    click_and_wait(browser, nightly.find_element(By.CSS_SELECTOR, "button[data-action=pause]"))

    assert browser.current_url == f"{server}/ui/schedules"
    assert (
        browser.find_element(By.CSS_SELECTOR, ".notice-done").text == "paused schedule nightly-etl"
    )
    (event,) = schedule_events(world, "nightly-etl", "core.schedule.paused")
    assert event.data["actor"] == "ops-alice"
    nightly = row(browser, "nightly-etl")
    assert "paused" in nightly.text
    assert nightly.find_elements(By.CSS_SELECTOR, "button[data-action=resume]")


def test_the_detail_page_and_a_trigger_sent_twice_fires_once(
    browser: Any, server: str, world: World
) -> None:
    sign_in(browser, server, world.secrets["operate"], then="/ui/schedules/hourly-sync")
    history = browser.find_element(By.CSS_SELECTOR, "table.history").text
    assert "skipped" in history and "paused" in history
    assert "skipped if still paused" in browser.page_source  # its next nominal times
    browser.get(f"{server}/ui/schedules/nightly-etl")
    assert "2026-11-04T02:00:00+01:00" in browser.page_source  # the next fire, local time
    form = browser.find_element(By.CSS_SELECTOR, "form[action$='/trigger']")
    html = form.get_attribute("outerHTML")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert (
        "triggered schedule nightly-etl"
        in browser.find_element(By.CSS_SELECTOR, ".notice-done").text
    )
    # the same form again (its key drawn when the page was rendered): nothing fires
    browser.execute_script(
        "document.querySelector('main').insertAdjacentHTML('beforeend', arguments[0])", html
    )
    again = browser.find_elements(By.CSS_SELECTOR, "form[action$='/trigger']")[-1]
    click_and_wait(browser, again.find_element(By.CSS_SELECTOR, "button"))
    assert "already triggered" in browser.find_element(By.CSS_SELECTOR, ".notice-done").text
    assert len(schedule_events(world, "nightly-etl", "core.schedule.fired")) == 1
