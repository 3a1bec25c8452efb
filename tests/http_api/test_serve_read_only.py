"""`rota serve` appends nothing, ever: over a store whose configuration changed its
`[[budgets]]` (which `rota.open` records as `core.budget.configured`), the log head is the
same after startup and after every read route of the API and of the web view."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from browser.test_web_forms import signed_in

import rota
from http_api.test_cli_http import CONFIG as DAEMON_CONFIG
from http_api.test_cli_http import TIMEOUT, _env, token

# The daemon tests' config (braces doubled for format()) and a budget whose max changes.
CONFIG = (
    DAEMON_CONFIG.replace("{", "{{").replace("}", "}}")
    + """
[[budgets]]
unit = "usd"
max = {max}
per = "work"
"""
)
READS = [
    "/v1/works",
    "/v1/work/w",
    "/v1/capacity",
    "/v1/scheduler",
    "/v1/holds",
    "/v1/schedules",
    "/v1/schedules/nightly",
    "/v1/events?after=0",
    "/v1/audit/head",
    "/v1/openapi.json",
    "/healthz",
    "/readyz",
    "/metrics",
]
PAGES = [
    "/ui/",
    "/ui/needs-you",
    "/ui/works",
    "/ui/work/w",
    "/ui/capacity",
    "/ui/schedules",
    "/ui/schedules/nightly",
    "/ui/audit",
]


def budget_events(path: Path) -> int:
    with rota.open(path, config={}, read_only=True) as s:
        return sum(1 for r in s.store.read(0, 10_000) if r.type == "core.budget.configured")


def test_a_changed_budgets_config_is_not_recorded_by_open_read_only(tmp_path: Path) -> None:
    path = tmp_path / "rota.db"
    config = {"budgets": [{"unit": "usd", "max": 50, "per": "work"}]}
    with rota.open(path, config=config) as s:
        head = s.store.head()
    changed = {"budgets": [{"unit": "usd", "max": 10, "per": "work"}]}
    with rota.open(path, config=changed, read_only=True) as s:
        assert s.store.head() == head
    with rota.open(path, config=changed) as s:  # a read-write open records it: the contrast
        assert s.store.head().position > head.position
    assert budget_events(path) == 2


def test_serve_appends_nothing_at_startup_or_on_any_read(tmp_path: Path) -> None:
    home = tmp_path
    (home / "rota.toml").write_text(CONFIG.format(max=50))
    with rota.open(home / "rota.db", config=home / "rota.toml") as s:
        s.submit("w", binding="ok")
        s.schedule("nightly", binding="ok", cron="0 3 * * *")
        before = s.store.head()
    (home / "rota.toml").write_text(CONFIG.format(max=10))  # a changed [[budgets]]
    made = token(home, "ops", "admin")
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "rota", "serve", "--listen", "127.0.0.1:0"],
        cwd=home,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None and process.stdout is not None
    try:
        line = process.stderr.readline()
        assert line.endswith("(read-only)\n"), line
        url = line.split()[3]
        headers = {"Authorization": f"Bearer {made}"}

        def head() -> tuple[int, str]:
            answer = httpx.get(f"{url}/v1/audit/head", headers=headers, timeout=30).json()
            return answer["position"], answer["hash"]

        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            assert head() == (before.position, before.hash), "startup appended"
            for path in READS:
                answer = client.get(path)
                assert answer.status_code == 200, (path, answer.text[:300])
                assert head() == (before.position, before.hash), f"GET {path} appended"
        browser, _ = signed_in(url, made)
        try:
            for path in PAGES:
                page = browser.get(path)
                assert page.status_code == 200, (path, page.text[:300])
                assert head() == (before.position, before.hash), f"GET {path} appended"
        finally:
            browser.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        process.stdout.close()
        process.stderr.close()
    assert budget_events(home / "rota.db") == 1
    assert os.path.exists(home / "rota.db")
