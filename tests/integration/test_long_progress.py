"""Progress of long operations (issue 28, item 10): a bar with rate and ETA on a terminal,
periodic log records anywhere else, and doctor and recover-corrupt drawing it as rebuild,
verify, export and import do."""

from __future__ import annotations

import argparse
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.cli.run_logs import progress_logging
from rota.replay.doctor import doctor
from rota.replay.progress import LOG_EVERY, LOGGER, Progress
from rota.replay.recover_corrupt import recover_corrupt

from .test_doctor import build_store


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, _Records]]:
    logger = logging.getLogger("rota.test.progress")
    handler = _Records()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, handler
    finally:
        logger.removeHandler(handler)


def test_off_a_terminal_progress_is_a_log_record_every_few_seconds(
    captured: tuple[logging.Logger, _Records],
) -> None:
    logger, handler = captured
    now = [0.0]
    bar = Progress(1000, "verify", stream=io.StringIO(), clock=lambda: now[0], log=logger)
    assert bar.mode == "log" and not bar.enabled
    for step in range(1, 251):  # 250 steps of 0.1 s: 25 s in all, 4 items a step
        now[0] = step / 10
        bar.advance(4)
    bar.close()
    fields = [r.rota_fields for r in handler.records]  # type: ignore[attr-defined]
    assert [f["done"] for f in fields] == [400, 800, 1000]  # at 10 s, 20 s, then the end
    assert fields[0] == {
        "kind": "progress",
        "label": "verify",
        "done": 400,
        "total": 1000,
        "rate": 40.0,
        "eta_seconds": 15,
    }
    assert handler.records[0].getMessage() == "verify:  40%  400/1000  40/s  ETA 0:15"
    assert handler.records[-1].getMessage() == "verify: done"
    assert fields[-1]["eta_seconds"] is None


def test_a_run_shorter_than_the_interval_writes_nothing(
    captured: tuple[logging.Logger, _Records],
) -> None:
    logger, handler = captured
    now = [0.0]
    with Progress(None, "import", stream=io.StringIO(), clock=lambda: now[0], log=logger) as bar:
        now[0] = LOG_EVERY - 0.5
        bar.advance(10_000)
    assert handler.records == []


def test_a_terminal_bar_shows_rate_and_eta() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    now = [0.0]
    bar = Progress(3600 * 50, "rebuild", stream=Terminal(), clock=lambda: now[0])
    now[0] = 1.0
    bar.advance(50)  # 50 a second: an hour left
    assert bar.text(now[0]).endswith("   0%  50/180000  50/s  ETA 59:59")
    now[0] = 2.0
    bar.advance(49_950)  # 25,000 a second: 5 s left
    assert bar.text(now[0]).endswith("  50000/180000  25,000/s  ETA 0:05")


def test_progress_records_reach_stderr_in_the_commands_log_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = argparse.Namespace(log_format="json", log_level=None, json=True)
    with progress_logging(args) as make:
        bar = make(10, "doctor: replay")
        assert bar.mode == "log"  # --json: never a bar
        LOGGER.info("verify: 50%", extra={"rota_fields": {"kind": "progress", "done": 5}})
        logging.getLogger("rota.projections").info("folding the log")  # hidden by default
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["logger"] == "rota.progress" and record["kind"] == "progress"
    assert record["done"] == 5


class _Recorder:
    """A progress factory that keeps every bar it made."""

    def __init__(self) -> None:
        self.bars: list[Progress] = []

    def __call__(self, total: int | None, label: str) -> Progress:
        bar = Progress(total, label, enabled=False)
        self.bars.append(bar)
        return bar

    def labels(self) -> dict[str, tuple[int | None, int]]:
        return {b.label: (b.total, b.done) for b in self.bars}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("progress"), works=12)


def test_doctor_draws_the_chain_and_the_replay(store: Path) -> None:
    recorder = _Recorder()
    report = doctor(str(store), progress=recorder)
    assert report.ok, report
    seen = recorder.labels()
    head, verified = seen["verify"]
    assert head is not None and head > 0 and verified == head
    assert "doctor: replay" in seen


def test_recover_corrupt_draws_the_chain_the_rebuild_and_the_verify(
    store: Path, tmp_path: Path
) -> None:
    log = tmp_path / "rota.db"
    log.write_bytes(store.read_bytes())
    (tmp_path / "rota.db.projections").write_bytes(b"not a database" * 100)
    recorder = _Recorder()
    report = recover_corrupt(str(log), "progress-trial", progress=recorder)
    assert report.verified
    assert {"verify", "rebuild"} <= set(recorder.labels())
    head = report.log_head_before
    assert all(b.done == head for b in recorder.bars if b.label == "rebuild")
