"""The shell executor's tests again with the forked Python wrapper: the spawner's fallback
where the install built no wrapper (no C compiler). Every guarantee holds either way. (The
tests that launch from another process use whichever wrapper that process finds installed.)"""

from __future__ import annotations

import pytest

from rota.infrastructure.executors import shell_spawner

from .test_shell_executor import *  # noqa: F403 (every test and fixture of that module)


@pytest.fixture(autouse=True)
def forked_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell_spawner, "installed_wrapper", lambda: None)
