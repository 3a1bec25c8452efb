"""A real scheduler on the in-memory store under a virtual clock that skips to what is due.

```python
from datetime import UTC, datetime, timedelta
import rota.testing

with rota.testing.open_test(start=datetime(2026, 3, 1, tzinfo=UTC)) as rt:
    rt.register("report", report)
    rt.schedule("nightly", binding="report", cron="30 2 * * *", timezone="Europe/Berlin")
    rt.advance(timedelta(days=30))           # 30 fires, in well under a second
    rt.assert_fired("nightly", at=[...])
```

`TestScheduler` wraps a real `rota.Scheduler` (`memory://`, a `ManualClock`, a fixed owner
name): the same cadence, commands, log and read models as production. Time moves only when
the test says so, and only when nothing runs:
- `run_until_idle()` runs passes until nothing is ready or running, waiting (in real time,
  at most `idle_timeout` seconds) for the callables the passes started (inline, one after
  the other in claim order, unless registered with `inline=False`); virtual time stands
  still meanwhile, so every outcome is recorded at the instant its attempt started;
- `advance(delta)` / `advance_to(when)` go forward, stopping at every due moment on the way
  (`rota.testing.moments`: retry timers, schedule due times) and running until idle at
  each, so a fire happens at its nominal time and a retry at its delay, never skipped nor
  coalesced by the jump;
- `run_until_quiet(within)` jumps from due moment to due moment until none is left, and
  refuses (`TimeSkipError`) when something is still due after the horizon `within` (an
  active schedule always is: use `advance` for those).

Before a jump longer than the lease TTL it hands the schedule runner's leader lease back
(`core.schedule.leader_released`, as a graceful stop does): the next pass takes it again at
once, where a lease left to lapse would record `leader_lost` and log a warning per jump.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, TypeVar, Unpack, overload
from zoneinfo import ZoneInfo

from rota.application.ports import LaunchContext
from rota.domain.errors import RotaError
from rota.domain.results import Result
from rota.embedded.opening import open as open_scheduler
from rota.embedded.registering import RegisterOptions, TypedBinding
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import Config, EntryCode
from rota.scheduler import Scheduler
from rota.testing import assertions, history
from rota.testing.moments import DueMoment, due_moments

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = "rota.testing"  # a fixed owner: the same test writes the same log
IDLE_TIMEOUT = 10.0  # real seconds a pass may wait for running callables
JOIN_MARGIN = 0.5  # past idle_timeout: the loop's own timeout reports first, when it can
PASS_THREAD = "rota-testing-passes"
MAX_STOPS = 10_000  # due moments one call may stop at
SKIP_REASON = "rota.testing: virtual time skipped ahead"
T = TypeVar("T")


class TimeSkipError(RuntimeError):
    """The kit cannot move time as asked: something is still due past the horizon, too many
    due moments, callables still running after `idle_timeout`, or a due moment no pass acts
    on. The message says which, and what to do."""


def _zone(zone: str | tzinfo) -> tzinfo:
    return ZoneInfo(zone) if isinstance(zone, str) else zone


class TestScheduler:
    """A `rota.Scheduler` under a virtual clock, with time skipping and history reads.

    The usual calls are the scheduler's own (`register`, which runs callables inline by
    default, `bind`, `submit`, `schedule`, `schedules`, `work`, `works`, `executions`,
    `events`, `release`, `cancel`, `retry`, `handle`, `tick`); `scheduler` is the whole
    `rota.Scheduler`, `clock` its `ManualClock`, `zone` the zone messages show times in.
    """

    __test__ = False  # a library class, not a pytest test class

    def __init__(
        self,
        scheduler: Scheduler,
        clock: ManualClock,
        *,
        zone: str | tzinfo = UTC,
        idle_timeout: float = IDLE_TIMEOUT,
        max_stops: int = MAX_STOPS,
    ) -> None:
        self.scheduler, self.clock = scheduler, clock
        self.zone = _zone(zone)
        self.idle_timeout, self.max_stops = idle_timeout, max_stops
        self.bind = scheduler.bind
        self.submit = scheduler.submit
        self.schedule = scheduler.schedule
        self.schedules = scheduler.schedules
        self.work = scheduler.work
        self.works = scheduler.works
        self.executions = scheduler.executions
        self.events = scheduler.events
        self.release = scheduler.release
        self.cancel = scheduler.cancel
        self.retry = scheduler.retry
        self.handle = scheduler.handle
        self.tick = scheduler.tick
        self.closed = False
        self._stuck: threading.Thread | None = None  # a pass that outlived idle_timeout

    @overload
    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], Result | Awaitable[Result]],
        **options: Unpack[RegisterOptions],
    ) -> TypedBinding[Any]: ...
    @overload
    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], Awaitable[T]],
        **options: Unpack[RegisterOptions],
    ) -> TypedBinding[T]: ...
    @overload
    def register(
        self, name: str, fn: Callable[[LaunchContext], T], **options: Unpack[RegisterOptions]
    ) -> TypedBinding[T]: ...
    @overload
    def register(
        self, name: str, fn: None = None, **options: Unpack[RegisterOptions]
    ) -> TypedBinding[Any]: ...
    def register(
        self,
        name: str,
        fn: Callable[[LaunchContext], object] | None = None,
        **options: Unpack[RegisterOptions],
    ) -> TypedBinding[Any]:
        """`Scheduler.register`, with `inline=True` by default: a pass runs the callables
        it starts one after the other on its own thread, in claim order, so the same test
        writes the same log every time. `inline=False` runs them on the pool, as in
        production (the order outcomes are recorded in then follows thread timing)."""
        options.setdefault("inline", True)
        return self.scheduler.register(name, fn, **options)

    @property
    def now(self) -> datetime:
        """Virtual time (UTC)."""
        return self.clock.now()

    # -- moving time ----------------------------------------------------------------------

    def run_until_idle(self) -> None:
        """Run passes until nothing is ready or running, without moving time.

        The passes run on a thread of their own (with the test's context variables), so a
        callable that never returns, inline or not, is a `TimeSkipError` after
        `idle_timeout` real seconds instead of a test that hangs."""
        self._check_open()
        if self._stuck is not None and self._stuck.is_alive():
            raise TimeSkipError(f"an earlier pass is still running: {self._running()}")
        failures: list[BaseException] = []

        def passes() -> None:
            try:
                self.scheduler.run_until_idle(timeout=self.idle_timeout)
            except BaseException as exc:  # handed to the test's thread below
                failures.append(exc)

        worker = threading.Thread(
            target=contextvars.copy_context().run, args=(passes,), name=PASS_THREAD, daemon=True
        )
        worker.start()
        worker.join(self.idle_timeout + JOIN_MARGIN)
        if worker.is_alive():
            self._stuck = worker
            raise TimeSkipError(self._running())
        if failures:
            failure = failures[0]
            if isinstance(failure, RotaError) and failure.code == EntryCode.TIMEOUT:
                raise TimeSkipError(self._running()) from failure
            raise failure

    def _running(self) -> str:
        held = ", ".join(sorted(self.scheduler.queries.state.leases_held())) or "none held yet"
        return (
            f"attempts still running after {self.idle_timeout} s of real time ({held}): "
            "time moves only once nothing runs, so a callable that waits for what the test "
            "does next never returns; give idle_timeout more for slow callables"
        )

    def advance(self, delta: timedelta) -> list[datetime]:
        """Move virtual time `delta` forward, stopping at every due moment on the way and
        running until idle at each; returns the due moments it stopped at."""
        if not isinstance(delta, timedelta):
            raise TypeError(f"advance() takes a timedelta, not {type(delta).__name__}")
        if delta < timedelta(0):
            raise ValueError(
                f"advance() moves time forward, not by {delta}: a clock step back is "
                "clock.step(seconds=-...), then run_until_idle()"
            )
        return self._until(self.now + delta)

    def advance_to(self, when: datetime) -> list[datetime]:
        """`advance` to the instant `when` (aware, not before now)."""
        target = assertions.aware(when, "advance_to(when)")
        if target < self.now:
            raise ValueError(
                f"advance_to({assertions.show(target, self.zone)}) is before now "
                f"({assertions.show(self.now, self.zone)}): time only moves forward here"
            )
        return self._until(target)

    def run_until_quiet(self, within: timedelta) -> list[datetime]:
        """Jump from due moment to due moment until none is left (paused schedules aside),
        within the horizon `within` from now; returns the moments stopped at. Something
        still due after the horizon (an active schedule fires forever) is a TimeSkipError."""
        if not isinstance(within, timedelta) or within <= timedelta(0):
            raise ValueError(
                f"run_until_quiet(within=...) needs a positive timedelta, not {within!r}"
            )
        horizon = self.now + within
        stops: list[datetime] = []
        self.run_until_idle()
        while (moment := self.next_due(paused=False)) is not None:
            if moment.at > horizon:
                raise TimeSkipError(
                    f"not quiet within {within}: {moment.what} is due at "
                    f"{assertions.show(moment.at, self.zone)}, after the horizon "
                    f"{assertions.show(horizon, self.zone)}. An active schedule is always "
                    "due again: pause or remove it, or advance() to a time instead"
                )
            self._stop_at(moment, stops, paused=False)
        return stops

    def next_due(self, *, paused: bool = True) -> DueMoment | None:
        """The soonest due moment (a retry timer, a schedule's due time; with `paused`
        False, paused schedules' due times left out), or None."""
        self._check_open()
        found = due_moments(self.scheduler)
        return next((m for m in found if paused or not m.paused), None)

    def _until(self, target: datetime) -> list[datetime]:
        stops: list[datetime] = []
        self.run_until_idle()
        while (moment := self.next_due()) is not None and moment.at <= target:
            self._stop_at(moment, stops, paused=True)
        self._skip_to(target)
        self.run_until_idle()
        return stops

    def _stop_at(self, moment: DueMoment, stops: list[datetime], *, paused: bool) -> None:
        """Go to `moment` and run until idle there; a moment already due that the passes
        left due is given one more pass, then refused as stuck."""
        if len(stops) >= self.max_stops:
            raise TimeSkipError(
                f"stopped at {len(stops)} due moments without reaching the end (next: "
                f"{moment.what} at {assertions.show(moment.at, self.zone)}); a schedule "
                "that fires this often makes a slow test: advance less, or raise max_stops"
            )
        if moment.at <= self.now:
            self.run_until_idle()
            again = self.next_due(paused=paused)
            if again is not None and again.at <= self.now:
                raise TimeSkipError(
                    f"stuck at {assertions.show(self.now, self.zone)}: {again.what} is due "
                    "but no pass acts on it (does another scheduler on this store lead the "
                    "schedules?)"
                )
            return
        self._skip_to(moment.at)
        stops.append(moment.at)
        self.run_until_idle()

    def _skip_to(self, when: datetime) -> None:
        delta = when - self.now
        if delta <= timedelta(0):
            return
        if delta.total_seconds() >= self.scheduler.settings.lease_seconds:
            self.scheduler.host.schedule_runner.release(reason=SKIP_REASON)
        self.clock.advance(delta.seconds, days=delta.days, microseconds=delta.microseconds)

    # -- what happened --------------------------------------------------------------------

    def fires(self, schedule: str) -> list[history.Fire]:
        """Every fire of `schedule` (`history.fires`)."""
        return history.fires(self.scheduler, schedule)

    def fire(self, schedule: str, at: datetime) -> history.Fire:
        """The fire of `schedule` for the nominal time `at` (AssertionError if none)."""
        nominal = assertions.aware(at, "fire(at)")
        for found in self.fires(schedule):
            if found.nominal == nominal:
                return found
        raise AssertionError(
            f"schedule {schedule!r} did not fire for {assertions.show(nominal, self.zone)}"
        )

    def fired_at(self, schedule: str) -> list[datetime]:
        """The nominal times `schedule` fired for (`history.fired_at`)."""
        return history.fired_at(self.scheduler, schedule)

    def skipped(self, schedule: str) -> list[history.Skip]:
        """The nominal times `schedule` skipped, with reasons (`history.skipped`)."""
        return history.skipped(self.scheduler, schedule)

    def attempts(self, work_id: str) -> list[history.Attempt]:
        """The Work's attempts (`history.attempts`)."""
        return history.attempts(self.scheduler, work_id)

    def retries(self, work_id: str) -> list[history.Retry]:
        """The retry timers the Work's failures armed (`history.retries`)."""
        return history.retries(self.scheduler, work_id)

    def retried_after(self, work_id: str) -> list[timedelta]:
        """From each failure to its retry's start (`history.retried_after`)."""
        return history.retried_after(self.scheduler, work_id)

    def held_by_budget(self, work_id: str) -> list[history.BudgetHold]:
        """The Work's starts a budget refused (`history.held_by_budget`)."""
        return history.held_by_budget(self.scheduler, work_id)

    def assert_fired(self, schedule: str, at: Sequence[datetime]) -> None:
        """`schedule` fired for exactly the nominal times `at` (`assertions.assert_fired`)."""
        assertions.assert_fired(self.scheduler, schedule, at, zone=self.zone)

    def assert_skipped(
        self, schedule: str, at: Sequence[datetime], *, reason: str | None = None
    ) -> None:
        """`schedule` skipped exactly `at` (`assertions.assert_skipped`)."""
        assertions.assert_skipped(self.scheduler, schedule, at, reason=reason, zone=self.zone)

    def assert_retried(self, work_id: str, after: Sequence[timedelta]) -> None:
        """The Work's retries started `after` its failures (`assertions.assert_retried`)."""
        assertions.assert_retried(self.scheduler, work_id, after, zone=self.zone)

    def assert_held_by_budget(
        self,
        work_id: str,
        *,
        budget: str | None = None,
        window: str | None = None,
        released: bool | None = None,
    ) -> history.BudgetHold:
        """A budget held the Work (`assertions.assert_held_by_budget`)."""
        return assertions.assert_held_by_budget(
            self.scheduler, work_id, budget=budget, window=window, released=released, zone=self.zone
        )

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this TestScheduler is closed")

    def close(self) -> None:
        """Close the scheduler (its store goes with it: `memory://` is private)."""
        if not self.closed:
            self.closed = True
            self.scheduler.close()

    def __enter__(self) -> TestScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_test(
    config: Config | dict[str, Any] | str | os.PathLike[str] | None = None,
    *,
    start: datetime = DEFAULT_START,
    zone: str | tzinfo = UTC,
    idle_timeout: float = IDLE_TIMEOUT,
    max_stops: int = MAX_STOPS,
) -> TestScheduler:
    """A `TestScheduler` on a fresh private `memory://` store, its clock at `start`.

    `config` is what `rota.open` takes (a dict of `rota.toml`'s tables, a `Config`, a
    file); None is the defaults, never `./rota.toml`. Its `[[schedules]]` are applied, as
    `rota run` applies them (source `config`); register their bindings' callables next.
    `zone` is the zone failure messages show times in (besides UTC). `idle_timeout`: real
    seconds to wait for running callables; `max_stops`: due moments one `advance` or
    `run_until_quiet` may stop at.
    """
    begin = assertions.aware(start, "open_test(start=...)")
    if idle_timeout <= 0 or max_stops < 1:
        raise ValueError("idle_timeout must be > 0 and max_stops >= 1")
    shown_zone = _zone(zone)  # an unknown zone name fails here, before anything opens
    clock = ManualClock(begin)
    scheduler = open_scheduler(
        "memory://", config={} if config is None else config, clock=clock, owner=OWNER
    )
    try:
        if scheduler.config.schedules:  # as `rota run` applies them when it starts
            scheduler.schedules.apply(scheduler.config.schedules)
    except BaseException:
        scheduler.close()
        raise
    return TestScheduler(
        scheduler, clock, zone=shown_zone, idle_timeout=idle_timeout, max_stops=max_stops
    )


__all__ = ["DEFAULT_START", "TestScheduler", "TimeSkipError", "open_test"]
