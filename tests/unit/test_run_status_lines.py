"""`rota run`'s status lines (`rota.cli.run_logs.Status`) are written whole, under the run's
log handler's lock: a record another thread logs at the same moment (a launch refused as
the daemon stops) never lands between a status line and its newline, so every line on
stderr stays one JSON object."""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable

import pytest

from rota.cli.run_logs import Status
from rota.infrastructure.logging import LogSettings, configured


class _Recorder(io.StringIO):
    """stderr that notes, for each write, whether another thread could log right then."""

    def __init__(self, probe: Callable[[], bool]) -> None:
        super().__init__()
        self.probe = probe
        self.writes: list[tuple[str, bool]] = []

    def write(self, text: str) -> int:
        self.writes.append((text, self.probe()))
        return super().write(text)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_status_line_is_one_write_with_its_newline_under_the_handlers_lock(
    monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    settings = LogSettings(format=fmt, level="info")  # type: ignore[arg-type]
    handlers: list[object] = []

    def another_thread_could_log() -> bool:
        """Whether the handler's lock is free for another thread now (never blocks)."""
        free: list[bool] = []

        def attempt() -> None:
            lock = handlers[0].lock  # type: ignore[attr-defined]
            got = lock.acquire(blocking=False)
            free.append(got)
            if got:
                lock.release()

        probe = threading.Thread(target=attempt)
        probe.start()
        probe.join()
        return free[0]

    stream = _Recorder(another_thread_could_log)
    monkeypatch.setattr(sys, "stderr", stream)
    with configured(settings, stream) as handler:
        handlers.append(handler)
        Status(settings, handler).say("stopped", "stopped")
    status = [(text, free) for text, free in stream.writes if "stopped" in text]
    assert len(status) == 1, stream.writes  # the line and its newline in one write
    text, free = status[0]
    assert text.endswith("\n") and not free  # written while no other record could be
    if fmt == "json":
        assert json.loads(text)["message"] == "stopped"
