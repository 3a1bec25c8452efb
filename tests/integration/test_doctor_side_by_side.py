"""`rota doctor` folds its projections side by side, in forked children that open the log
read-only again (`ReadOnlyLog.reopened`), with the same report as folding them in turn; a
child that fails leaves the folds to this process, whose own error (if any) is reported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rota.replay import side_by_side
from rota.replay.doctor import doctor
from rota.replay.read_only import ReadOnlyLog

from .test_doctor import store, template  # noqa: F401  (fixtures)


def _report(path: Path) -> list[tuple[str, str, str]]:
    return [(c.name, c.status, c.detail) for c in doctor(str(path)).checks]


def test_the_children_open_the_log_read_only_and_the_report_is_the_serial_one(
    store: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert side_by_side.can_split(ReadOnlyLog(store, immutable=True), 2), "needs fork, 2 CPUs"
    marker = store.parent / "opened-by"
    reopened = ReadOnlyLog.reopened

    def recording(self: ReadOnlyLog) -> ReadOnlyLog:
        marker.write_text(str(os.getpid()))
        log = reopened(self)
        assert isinstance(log, ReadOnlyLog) and log.immutable == self.immutable
        return log

    monkeypatch.setattr(ReadOnlyLog, "reopened", recording)
    side_by_side_report = _report(store)
    assert marker.is_file() and int(marker.read_text()) != os.getpid()
    monkeypatch.setattr(side_by_side, "can_split", lambda log, count: False)
    assert side_by_side_report == _report(store)
    assert all(status != "fail" for _, status, _ in side_by_side_report)


def test_a_child_that_fails_leaves_the_folds_to_this_process(
    store: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = _report(store)

    def broken(self: ReadOnlyLog) -> ReadOnlyLog:
        raise OSError("the child cannot open the log")

    monkeypatch.setattr(ReadOnlyLog, "reopened", broken)
    assert _report(store) == expected
