"""The composition root: what it wires, and what it does when derived data is unusable."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import rota
from rota import bootstrap
from rota.infrastructure.stores import open_store


def test_an_unusable_projection_store_is_logged_and_the_log_is_folded_instead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "not-a-dir").write_text("a file where the projections' folder would be")
    with rota.open(tmp_path / "a.db") as scheduler:
        scheduler.register("job", lambda ctx: "ok")
        scheduler.submit("w", binding="job")
    caplog.set_level(logging.WARNING, logger="rota")
    bad = tmp_path / "not-a-dir" / "x.projections"
    with rota.open(tmp_path / "a.db", projections=bad) as scheduler:
        assert scheduler.service.stored is None
        view = scheduler.work("w")
        assert view is not None and view.state == "ready"
    assert any("folding the log from position 0 instead" in r.getMessage() for r in caplog.records)


def test_the_root_wires_the_builtin_executors_and_their_registrations() -> None:
    with open_store("memory://") as store:
        executors = bootstrap.builtin_executors()
        service = bootstrap.build_service(
            store, owner="t", registrations=bootstrap.registrations_of(executors)
        )
        host = bootstrap.build_host(service, executors)
        assert set(host.executors) == {"shell"}
        assert service.registrations["shell"].pool == "jobs"
        host.close()
