"""Headless Chromium for the web view's tests and screenshots, through Selenium and the
chromedriver of Debian's `chromium-driver` (never a downloaded browser or driver).

Outside CI a missing Chromium skips the tests, loudly; under CI (`CI=true`) it fails them:
`.ci/run` installs `chromium` and `chromium-driver` with apt where they are missing.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

CHROMIUM = os.environ.get("ROTA_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ROTA_CHROMEDRIVER", "/usr/bin/chromedriver")


def missing() -> str | None:
    """Why no browser can run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).is_file() and os.access(path, os.X_OK)) and not shutil.which(path):
            return f"{path} is missing: apt-get install -y chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package is missing: pip install -r requirements.lock"
    return None


def chromium(width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """A headless Chromium under chromedriver; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver


def click_and_wait(driver, element, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    """Click `element` and wait until the page it was on has been replaced (a form's POST
    and its redirect), so the test reads the new page, never the old one."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()

    def replaced(driver) -> bool:  # type: ignore[no-untyped-def]
        # A stale element is StaleElementReferenceException, or (newer chromedriver, while
        # the next document is committing) "Node with given id does not belong to the
        # document": both mean the old page is gone.
        try:
            page.is_enabled()
        except WebDriverException:
            return True
        return False

    wait = WebDriverWait(driver, timeout)
    wait.until(replaced)
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")


def sign_in(driver, base: str, token: str, then: str = "/ui/") -> None:  # type: ignore[no-untyped-def]
    """Fill the sign-in form as a person would, and land on `then`."""
    from urllib.parse import quote

    from selenium.webdriver.common.by import By

    driver.get(f"{base}/ui/sign-in?next={quote(then, safe='')}")
    driver.find_element(By.ID, "token").send_keys(token)
    button = driver.find_element(By.CSS_SELECTOR, "form[action='/ui/sign-in'] button[type=submit]")
    click_and_wait(driver, button)


def full_page_png(driver, path: Path, width: int = 1280) -> None:  # type: ignore[no-untyped-def]
    """A screenshot of the whole page (not only the window), as PNG."""
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    height = int(metrics["cssContentSize"]["height"])
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
