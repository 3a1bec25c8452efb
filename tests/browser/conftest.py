"""Fixtures of the browser tests: one headless Chromium per module, and a fresh demo store
served on loopback per test.

Without Chromium (or selenium) the browser tests are skipped with a loud reason, except
under CI (`CI=true`), where that is a failure: `.ci/run` installs Debian's `chromium` and
`chromium-driver` where they are missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import chromium
from .world import World, build, close, serve


def _require_browser() -> None:
    reason = chromium.missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the browser tests, but {reason}", pytrace=False)
    pytest.skip(f"!!! BROWSER TESTS NOT RUN: {reason} !!!")


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    _require_browser()
    browser = chromium.chromium()
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    built = build(tmp_path)
    try:
        yield built
    finally:
        close(built)


@pytest.fixture
def server(world: World) -> Iterator[str]:
    running = serve(world)
    try:
        yield running.url
    finally:
        running.stop()


@pytest.fixture
def browser(driver: Any, server: str) -> Any:
    """The module's browser with no cookie left from another test."""
    driver.delete_all_cookies()
    driver.get(f"{server}/ui/sign-in")
    driver.delete_all_cookies()
    return driver
