"""pytest fixtures for `rota.testing`, loaded by pytest itself once rota is installed.

pyproject.toml declares this module under the `pytest11` entry points, so `pip install
rota` is all a project needs:

```python
@pytest.mark.rota_test(start=datetime(2026, 3, 1, tzinfo=UTC), zone="Europe/Berlin")
def test_nightly(rota_test):
    rota_test.register("report", report)
    rota_test.schedule("nightly", binding="report", cron="30 2 * * *", timezone="Europe/Berlin")
    rota_test.advance(timedelta(days=30))
```

- `rota_test`: a fresh `TestScheduler` per test, closed after it (passed or failed);
- `rota_start` (default 2026-01-01 00:00 UTC) and `rota_config` (default: rota's
  defaults, never `./rota.toml`): override them in a `conftest.py` for a whole folder;
- the marker `@pytest.mark.rota_test(start=..., config=..., zone=..., idle_timeout=...,
  max_stops=...)` sets any of `open_test`'s arguments for one test, over the fixtures.

Being `rota.testing.pytest_plugin`, loading it imports the `rota` package (and
`rota.testing`) when pytest starts: about half a second once per session, in any project
that has rota installed. The fixtures themselves cost only the tests that use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rota.testing.kit import TestScheduler

MARKER = "rota_test"
MARKER_HELP = (
    "rota_test(start=None, config=None, zone=None, idle_timeout=None, max_stops=None): "
    "open_test's arguments for this test's rota_test fixture (rota.testing)"
)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker, so `--strict-markers` accepts it."""
    config.addinivalue_line("markers", MARKER_HELP)


@pytest.fixture
def rota_start() -> datetime:
    """Where the virtual clock of `rota_test` starts (override it in a conftest.py)."""
    return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def rota_config() -> Any:
    """The configuration `rota_test` opens with (a dict of rota.toml's tables, a
    `rota.Config` or a file; None: the defaults). Override it in a conftest.py."""
    return None


@pytest.fixture
def rota_test(
    request: pytest.FixtureRequest, rota_start: datetime, rota_config: Any
) -> Iterator[TestScheduler]:
    """A `rota.testing.TestScheduler` of this test's own, closed when the test ends."""
    from rota.testing.kit import open_test

    options: dict[str, Any] = {"start": rota_start, "config": rota_config}
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        if marker.args:
            raise TypeError(f"@pytest.mark.{MARKER} takes keywords only ({MARKER_HELP})")
        options.update(marker.kwargs)
    with open_test(**options) as opened:
        yield opened


__all__ = ["rota_config", "rota_start", "rota_test"]
