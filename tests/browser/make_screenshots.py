"""Screenshots of every page of the web view, for docs/web.md: `docs/images/web-*.png`.

    .venv/bin/python tests/browser/make_screenshots.py [OUT_DIR]

Builds the demonstration store of `world.py` (fixed clock, so the pictures are the same
from run to run), serves the web view on loopback and signs in with Chromium as an admin
token (and as a read token for the read-only picture).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: this folder is the package `browser`

from browser import chromium as browser  # noqa: E402
from browser import world  # noqa: E402

PAGES = (
    ("overview", "/ui/"),
    ("needs-you", "/ui/needs-you"),
    ("works", "/ui/works"),
    ("work", "/ui/work/sync-orders"),
    ("work-phases", "/ui/work/build-1842"),
    ("work-lost", "/ui/work/ingest-feed"),
    ("work-failed", "/ui/work/migrate-db"),
    ("work-schedule", "/ui/work/schedule.hourly-sync%40noop"),
    ("work-flow", "/ui/work/report-weekly"),
    ("events", "/ui/events?limit=25"),
    ("charts", "/ui/charts?hours=1"),
    ("capacity", "/ui/capacity"),
    ("schedules", "/ui/schedules"),
    ("schedule", "/ui/schedules/hourly-sync"),
    ("audit", "/ui/audit"),
)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as directory:
        demo = world.build(Path(directory))
        server = world.serve(demo)
        driver = browser.chromium()
        try:
            driver.get(f"{server.url}/ui/sign-in")
            browser.full_page_png(driver, out / "web-sign-in.png")
            browser.sign_in(driver, server.url, demo.secrets["admin"])
            for name, path in PAGES:
                driver.get(server.url + path)
                browser.full_page_png(driver, out / f"web-{name}.png")
                print(f"docs/images/web-{name}.png")
            driver.delete_all_cookies()
            browser.sign_in(driver, server.url, demo.secrets["read"], then="/ui/needs-you")
            browser.full_page_png(driver, out / "web-needs-you-read-only.png")
        finally:
            driver.quit()
            server.stop()
            world.close(demo)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[1] / "docs" / "images")
