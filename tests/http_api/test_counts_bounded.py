"""The overview, `/v1/holds` and `/metrics` count every Work without bringing the quiet ones
into memory: on a store that holds only its active Works, they answer from the Works'
tally (`rota.projections.work_tally`) and the store's quiet Works stay on disk."""

from __future__ import annotations

import threading
from pathlib import Path

import rota
from http_api.conftest import echo, start_api
from http_api.test_metrics import samples, scrape
from rota.http.web.views import overview
from rota.infrastructure.stored_works import StoredWorks

DONE = 40


def test_the_counts_over_every_work_leave_the_quiet_works_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "api.db"
    with rota.open(path) as scheduler:
        scheduler.register("echo", echo)
        for n in range(DONE):
            scheduler.submit(f"done-{n:02d}", binding="echo", input={"n": n})
        scheduler.run_until_idle(timeout=30)
        scheduler.service.lifecycle.record_served(["later"])  # a daemon elsewhere serves it
        scheduler.submit("waiting", binding="later", input={})
    with rota.open(path) as scheduler:
        scheduler.register("echo", echo)
        works = scheduler.service.projection.works
        assert isinstance(works, StoredWorks)
        api = start_api(scheduler, tmp_path)
        try:
            found = samples(scrape(api))
            assert found[("rota_works", (("scope", "root"), ("state", "completed")))] == DONE
            assert found[("rota_works", (("scope", "root"), ("state", "ready")))] == 1
            outcome = ("rota_attempts_total", (("binding", "echo"), ("outcome", "completed")))
            assert found[outcome] == DONE
            answer = api.client("read").get("/v1/holds")
            assert answer.status_code == 200 and answer.json() == {"holds": []}
            seen = overview(api.context)
            assert seen["total"] == DONE + 1
            assert dict(seen["states"])["completed"] == DONE
            # None of it read every Work: the quiet ones are still on disk.
            assert not works.complete
            assert len(list(works.in_memory())) < DONE
        finally:
            api.server.stop()


def test_the_server_counts_the_works_when_it_listens(tmp_path: Path) -> None:
    with rota.open(tmp_path / "api.db") as scheduler:
        scheduler.register("echo", echo)
        scheduler.submit("w", binding="echo", input={})
        assert scheduler.service.tallies._tally is None  # nothing counted before
        api = start_api(scheduler, tmp_path)
        try:
            for thread in threading.enumerate():
                if thread.name == "rota-tally":
                    thread.join(30)
            tally = scheduler.service.tallies._tally
            assert tally is not None and tally.complete and tally.works == 1  # no request
        finally:
            api.server.stop()
