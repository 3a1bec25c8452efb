"""Clock jumps of up to +-48 h (hypothesis, injected clock): no nominal time fires twice,
the catch-up policy decides after a forward jump, and every nominal time up to each
schedule's boundary is accounted for (fired, or recorded skipped with its reason)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trial_scale import scale

import rota
from rota.domain.schedule_specs import define, times_between
from rota.infrastructure.clock import ManualClock
from rota.replay.schedule_checks import account

START = datetime(2026, 10, 31, 22, 10, 7, tzinfo=UTC)  # the night before New York falls back
JUMP = st.integers(min_value=-48 * 3600, max_value=48 * 3600)


@settings(max_examples=scale(12, 500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jumps=st.lists(st.one_of(JUMP, st.integers(1, 300)), min_size=1, max_size=8))
def test_clock_jumps_never_fire_twice_and_account_for_every_time(jumps: list[int]) -> None:
    clock = ManualClock(START)
    with rota.open("memory://", clock=clock, owner="host-a") as s:
        s.register("job", lambda ctx: None)
        schedules = s.service.schedules
        schedules.define("minutely", binding="job", every="1m")
        schedules.define(
            "ny",
            binding="job",
            cron="*/20 0-3 * * *",
            timezone="America/New_York",
            catchup="all",
            overlap="buffer_all",
            max_catchup=5,
        )
        schedules.define("sparse", binding="job", every="10m", catchup="none", jitter=45)
        latest = clock.now()
        for jump in jumps:
            clock.advance(jump)
            before = {n: schedules.row(n).boundary for n in ("minutely", "ny", "sparse")}
            report = s.tick()
            assert not report.errors, report.errors
            now = clock.now()
            latest = max(latest, now)
            for name, was in before.items():
                row = schedules.row(name)
                assert row.boundary >= was  # a backward jump never rewinds it
                spec = define(every="1m") if name == "minutely" else None
                if spec is not None and now > was:
                    # After a forward jump, every time up to now is decided at once.
                    due = times_between(spec, row.definition.anchor, was, now)
                    assert not due or row.boundary == due[-1]
        fired = [
            r.delivery_id for r in s.store.read(0, 1_000_000) if r.type == "core.schedule.fired"
        ]
        assert len(fired) == len(set(fired))  # no nominal time fired twice
        found = account(s.store)
        assert found.problems == [], found.problems
        assert found.checked >= sum(1 for _ in fired)
