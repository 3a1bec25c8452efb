"""rota.testing's pytest fixtures as a user gets them (the `pytest11` entry point of the
installed package, nothing passed with `-p`), and docs/testing.md's example run as the user's
own test file. Each runs pytest in a subprocess on a file of its own, in an empty folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "testing.md"
MARKER = "<!-- kit-example -->"
EXAMPLE = re.compile(re.escape(MARKER) + r"\n```python\n(?P<code>.*?)\n```\n", re.DOTALL)


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest run as a user's project runs it: from its own folder, rota installed."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_docs_example_runs_as_a_users_test_file(tmp_path: Path) -> None:
    text = DOC.read_text()
    assert text.count(MARKER) == 1, f"{DOC.name} must mark exactly one example"
    found = EXAMPLE.search(text)
    assert found is not None, f"{MARKER} must precede a ```python block"
    (tmp_path / "test_nightly.py").write_text(found["code"] + "\n")

    done = _pytest(tmp_path, "--strict-markers", "--durations=0", "--durations-min=0")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED test_nightly.py::test_a_month_of_nightly_exports" in done.stdout
    # The docs quote its time (`pytest --durations`); measured, never asserted.
    durations = re.findall(r"^([\d.]+)s (setup|call|teardown) ", done.stdout, re.MULTILINE)
    print("docs example:", ", ".join(f"{phase} {seconds} s" for seconds, phase in durations))
    assert {phase for _, phase in durations} == {"setup", "call", "teardown"}


FIXTURES = """
from datetime import UTC, datetime

import pytest

KEPT = []


@pytest.fixture
def rota_start():  # what a conftest.py overriding the start looks like
    return datetime(2026, 6, 1, tzinfo=UTC)


def test_the_fixtures_defaults(rota_test, rota_config):
    KEPT.append(rota_test)
    assert rota_config is None
    assert rota_test.now == datetime(2026, 6, 1, tzinfo=UTC)
    assert not rota_test.closed
    assert rota_test.scheduler.queries.state.ledgers().budgets == ()


BUDGET = {"unit": "usd", "max": 5}


@pytest.mark.rota_test(
    start=datetime(2026, 3, 29, tzinfo=UTC), zone="Europe/Berlin", config={"budgets": [BUDGET]}
)
def test_the_marker_wins(rota_test):
    KEPT.append(rota_test)
    assert rota_test.now == datetime(2026, 3, 29, tzinfo=UTC)
    assert str(rota_test.zone) == "Europe/Berlin"
    budgets = rota_test.scheduler.queries.state.ledgers().budgets
    assert [b.id for b in budgets] == ["usd-work-lifetime"]


def test_a_failing_test(rota_test):
    KEPT.append(rota_test)
    assert False, "deliberately"


def test_every_scheduler_was_closed_after_its_test():
    assert len(KEPT) == 3
    assert [kept.closed for kept in KEPT] == [True, True, True]


@pytest.mark.rota_test(datetime(2026, 1, 1, tzinfo=UTC))
def test_a_positional_marker_argument_is_refused(rota_test):
    pass
"""


def test_the_fixtures_come_with_the_installed_package(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(FIXTURES)

    done = _pytest(tmp_path, "--strict-markers", "-p", "no:xdist")

    report = done.stdout
    assert "PASSED test_user.py::test_the_fixtures_defaults" in report, report + done.stderr
    assert "PASSED test_user.py::test_the_marker_wins" in report
    assert "FAILED test_user.py::test_a_failing_test - AssertionError: deliberately" in report
    assert "PASSED test_user.py::test_every_scheduler_was_closed_after_its_test" in report
    assert "ERROR test_user.py::test_a_positional_marker_argument_is_refused" in report
    assert "rota_test(start=None, config=None" in report  # the refusal names the keywords
    assert done.returncode == 1


def test_the_entry_point_names_the_plugin_module() -> None:
    from importlib.metadata import entry_points

    [plugin] = [e for e in entry_points(group="pytest11") if e.name == "rota"]
    assert plugin.value == "rota.testing.pytest_plugin"
    assert plugin.load().__name__ == "rota.testing.pytest_plugin"
