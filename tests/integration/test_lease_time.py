"""Lease time on real stores: renewals never shorten a lease when the wall clock steps
back (freezegun, under SQLite's default system clock; the store contract holds every store
to it with the store's own clock stepped back: tests/contract/test_lease_clock.py), and
expiry is judged by the store's clock, not the host's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from freezegun import freeze_time

import rota
from rota.infrastructure.clock import ManualClock


def test_a_renewal_never_shortens_a_lease_when_the_clock_steps_back(tmp_path: Path) -> None:
    with freeze_time("2026-12-01 12:00:00") as frozen, rota.open(tmp_path / "l.db") as s:
        s.register("job", lambda ctx: None)
        s.submit("w", binding="job")
        claimed = s.service.lifecycle.start_pass().claimed[0]
        execution = claimed.attempt.execution_id
        frozen.tick(30)  # type: ignore[attr-defined]
        first = s.service.lifecycle.renew(execution, 1)
        assert first == datetime(2026, 12, 1, 12, 1, 30, tzinfo=UTC)
        frozen.move_to("2026-12-01 10:00:00")  # type: ignore[attr-defined]  # two hours back
        again = s.service.lifecycle.renew(execution, 1)
        assert again == first  # kept, not shortened to 10:01
        for step_back in (1, 3600, 48 * 3600):
            frozen.move_to(first - timedelta(seconds=step_back + 60))  # type: ignore[attr-defined]
            assert s.service.lifecycle.renew(execution, 1) == first


def test_expiry_is_judged_by_the_store_clock_not_the_host_clock(tmp_path: Path) -> None:
    store_clock = ManualClock(datetime(2026, 12, 1, 12, tzinfo=UTC))
    with freeze_time("2030-01-01 00:00:00"), rota.open(tmp_path / "l.db", clock=store_clock) as s:
        # The host's wall clock is years ahead; only the store's clock judges the lease.
        s.register("job", lambda ctx: None)
        s.submit("w", binding="job")
        s.service.lifecycle.start_pass()
        s.service.lifecycle.invoke("w/1", 1)
        assert s.tick().recovered == 0
        store_clock.advance(59)
        assert s.tick().recovered == 0
        store_clock.advance(1)
        s.host.held.clear()  # as if the holder had vanished
        assert s.tick().recovered == 1
