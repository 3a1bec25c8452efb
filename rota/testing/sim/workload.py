"""What happens to a simulated deployment from outside: clients, operators, chaos.

A `Workload` is drawn once from the run's seeded random source, before the run: a
timeline of `Action`s (submits and duplicate submits, operator commands, schedule
pauses, configuration reloads, host crashes, pauses, graceful restarts and wall-clock
steps). The world performs each when true time reaches it, on a live host picked by the
same random source. What the engine decides is never part of the workload; only what a
person, a client or the machine room does to it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from random import Random
from typing import Any

from rota.application.commands.schedules import CATCHUPS, OVERLAPS
from rota.domain.events.admission import Budget
from rota.domain.events.flow import FlowConfigured, KeyRule, RateRule, ScopeShare
from rota.domain.policy import Binding, RetryPolicy, Settings

SCOPES = ("root", "team-a", "team-b")
BINDINGS = ("calls-retry", "calls-once", "jobs-retry", "jobs-once", "eager-retry")
SAFETIES = ("undeclared", "idempotent", "deduplicated")
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney")
OPERATOR = ("cancel", "interrupt", "retry", "release_hold", "confirm_stopped")
REQUESTED = frozenset({"cancel", "interrupt", "retry", "release_hold"})  # take a request id
CHAOS = ("crash", "pause", "restart", "step_forward", "step_back")
# Flow control (`Shape.flow`): tenants as concurrency keys and fair-share flows (one noisy,
# with weight 3), a shared resource key with a limit and a rate bucket, priorities and
# throttles. The draws come after every other draw of the workload, so the rest of a
# seed's timeline is what it was without flow control.
TENANTS = ("tenant:big", "tenant:big", "tenant:big", "tenant:a", "tenant:b", "tenant:c")
RESOURCE = "resource:stripe"
PRIORITIES = (0, 0, 0, 0, 0, 0, 5, 5, -5)


@dataclass(order=True)
class Action:
    """One thing done at true time `t` (seconds since the run began)."""

    t: float
    seq: int
    kind: str = field(compare=False)
    args: dict[str, Any] = field(compare=False, default_factory=dict)


@dataclass
class Shape:
    """The size of a run (the CLI's options)."""

    hosts: int = 3
    works: int = 100
    schedules: int = 10
    hours: float = 6.0
    operators: int = 40
    chaos: int = 30
    reloads: int = 3
    faults: bool = True
    # Keys, priorities, throttles and `[[keys]]`/`[[rates]]` rules (`flow_config`). Off
    # for the regression cases recorded before flow control (their seeds replay as then).
    flow: bool = True


def settings() -> Settings:
    """Small limits, so that capacity, scopes and leases are contended."""
    return Settings(
        concurrency=4,
        job_concurrency=3,
        lease_seconds=30.0,
        timeout_seconds=900.0,
        scope_limits={"team-a": 2},
        crash_loop_limit=5,
        recovery_failure_limit=3,
    )


def bindings(reload: int = 0) -> dict[str, Binding]:
    """The bindings Works run on; `reload` changes their config (a new generation)."""
    config = {"reload": reload}
    lost = RetryPolicy(max_attempts=3, delays=(10.0, 30.0), retry_on_lost=True)
    once = RetryPolicy(max_attempts=2, delays=(5.0,))
    return {
        "calls-retry": Binding(
            name="calls-retry", executor="sim-calls", config=config, retry=lost,
            timeout_seconds=600.0,
        ),
        "calls-once": Binding(
            name="calls-once", executor="sim-calls", config=config, retry=once,
            timeout_seconds=120.0,
        ),
        "jobs-retry": Binding(
            name="jobs-retry", executor="sim-jobs", config=config, retry=lost,
            timeout_seconds=900.0,
        ),
        "eager-retry": Binding(
            name="eager-retry", executor="sim-eager", config=config, retry=lost,
            timeout_seconds=600.0,
        ),
        "jobs-once": Binding(
            name="jobs-once", executor="sim-jobs", config=config, retry=once,
            timeout_seconds=300.0,
        ),
    }  # fmt: skip


def budgets() -> list[Budget]:
    return [Budget(id="tokens", unit="tokens", max=1500.0, per="scope", period="day")]


def flow_config(share: int = 10) -> FlowConfigured:
    """The flow rules of a run with `Shape.flow`: every tenant 2 at once (the noisy one 3,
    with weight 3), the shared resource 1 at once and 6 starts a minute (burst 2); the
    Work without keys of scope team-b is one fair-share flow of weight 2."""
    return FlowConfigured(
        keys=[
            KeyRule(key="tenant:*", concurrency=2, weight=1),
            KeyRule(key="tenant:big", concurrency=3, weight=3),
            KeyRule(key=RESOURCE, concurrency=1),
        ],
        rates=[RateRule(key=RESOURCE, count=6, period=60.0, burst=2)],
        share=share,
        scopes=[ScopeShare(path="team-b", weight=2)],
    )


class Workload:
    """The timeline of one run (module docstring)."""

    def __init__(self, random: Random, shape: Shape) -> None:
        self.random = random
        self.shape = shape
        self.horizon = shape.hours * 3600.0
        self.actions: list[Action] = []
        self._seq = 0
        self.work_ids: list[str] = []
        self.submitted_at: dict[str, float] = {}
        self.schedule_names: list[str] = []
        self.share = 10
        self._draw()
        if shape.flow:
            self._draw_flow()

    def add(self, t: float, kind: str, **args: Any) -> None:
        """Add an action (the world adds retries of failed client calls this way)."""
        self._seq += 1
        bisect.insort(self.actions, Action(t, self._seq, kind, args))

    def peek_due(self, t: float) -> Action | None:
        """The first action whose time has come, left on the timeline (None: none)."""
        return self.actions[0] if self.actions and self.actions[0].t <= t else None

    def pop_due(self, t: float) -> Action | None:
        """The first action whose time has come, taken off the timeline (None: none)."""
        if self.actions and self.actions[0].t <= t:
            return self.actions.pop(0)
        return None

    def next_at(self) -> float | None:
        return self.actions[0].t if self.actions else None

    def _at(self, share: float = 1.0) -> float:
        return round(self.random.uniform(0.0, self.horizon * share), 3)

    def _soon_after(self, target: str) -> float:
        """A moment while Work `target` is likely still running (a schedule: any time)."""
        submitted = self.submitted_at.get(target)
        if submitted is None:
            return self._at()
        return round(submitted + self.random.uniform(1.0, 240.0), 3)

    def _draw(self) -> None:
        random, shape = self.random, self.shape
        for i in range(shape.schedules):
            name = f"s{i}"
            self.schedule_names.append(name)
            every = random.choice((None, "5m", "17m", "1h"))
            cron = None if every else random.choice(("30 2 * * *", "*/20 * * * *", "0 * * * *"))
            self.add(
                0.0,
                "define_schedule",
                name=name,
                binding=random.choice(("calls-retry", "jobs-retry", "calls-once")),
                every=every,
                cron=cron,
                timezone=random.choice(ZONES),
                catchup=random.choice(CATCHUPS),
                overlap=random.choice(OVERLAPS),
            )
        for i in range(shape.works):
            work_id = f"w{i}"
            self.work_ids.append(work_id)
            t = self._at(0.8)
            submit = {
                "work_id": work_id,
                "binding": random.choice(BINDINGS),
                "scope": random.choice(SCOPES),
                "safety": random.choice(SAFETIES),
                "payload": {"n": i},
            }
            self.add(t, "submit", **submit)
            self.submitted_at[work_id] = t
            if random.random() < 0.15:  # a client that did not hear back submits again
                self.add(t + random.uniform(0.0, 120.0), "submit", **submit)
        for number in range(shape.works // 3):  # more input for Works submitted before
            target = random.choice(self.work_ids) if self.work_ids else None
            if target is None:
                continue
            at, key = self._soon_after(target), f"more-{number}"
            self.add(at, "input", target=target, key=key, payload={"more": number})
            if random.random() < 0.2:  # sent again, with the same key
                self.add(at + random.uniform(0.0, 60.0), "input", target=target, key=key,
                         payload={"more": number})  # fmt: skip
        for number, name in enumerate(self.schedule_names):
            # Operators fire schedules by hand: now (a key, sometimes sent twice), and a
            # backfill of the last hours (times fired already are no-ops).
            if random.random() < 0.5:
                key = f"manual-{number}"
                at = self._at()
                self.add(at, "trigger_now", target=name, key=key)
                if random.random() < 0.3:
                    self.add(at + random.uniform(0.0, 60.0), "trigger_now", target=name, key=key)
            if random.random() < 0.5:
                self.add(self._at(), "backfill", target=name, hours=random.choice((0.5, 1, 3)))
        for _ in range(max(1, shape.operators // 8)):
            self.add(self._at(), "cancel_retrying")  # a Work waiting out its retry timer
        for number in range(shape.operators):
            kind = random.choice((*OPERATOR, "pause_schedule", "resume_schedule"))
            target = random.choice(self.work_ids) if self.work_ids else None
            if kind.endswith("_schedule"):
                target = random.choice(self.schedule_names) if self.schedule_names else None
            if target is None:
                continue
            at = self._soon_after(target)
            if kind in REQUESTED and random.random() < 0.5:
                # With a request id, as the HTTP API sends one; sometimes sent twice (a
                # retry after a timeout): the second is the first's answer, not a new one.
                self.add(at, kind, target=target, request_id=f"op-{number}")
                if random.random() < 0.5:
                    again = at + random.uniform(0.0, 300.0)
                    self.add(again, kind, target=target, request_id=f"op-{number}")
            else:
                self.add(at, kind, target=target)
            if kind == "cancel" and random.random() < 0.5:
                # A client sends input at the very moment an operator cancels: whichever
                # the log records first, input is never accepted after the cancel.
                self.add(at, "input", target=target, key=f"racing-{number}", payload=number)
        for reload in range(1, shape.reloads + 1):
            self.add(self._at(), "reload", generation=reload)
        if not shape.faults:
            return
        hosts = [f"h{i + 1}" for i in range(shape.hosts)]
        for _ in range(shape.chaos):
            kind = random.choice(CHAOS)
            self.add(self._at(), kind, host=random.choice(hosts))

    def _draw_flow(self) -> None:
        """Flow control on the submits drawn already (their dicts are shared by the
        duplicate submits, so a Work's copies agree): four in five Works carry a tenant
        key (half of them the noisy tenant's), one in six also the shared resource key,
        some a priority, one in twenty a throttle; the starvation share is 3 or 10."""
        random = self.random
        self.share = random.choice((3, 10))
        submits = [a.args for a in self.actions if a.kind == "submit"]
        drawn: dict[str, dict[str, Any]] = {}
        for args in submits:
            work_id = args["work_id"]
            if work_id not in drawn:
                flow: dict[str, Any] = {}
                keys: list[str] = []
                if random.random() < 0.8:
                    keys.append(random.choice(TENANTS))
                if random.random() < 0.17:
                    keys.append(RESOURCE)
                if keys:
                    flow["keys"] = keys
                priority = random.choice(PRIORITIES)
                if priority:
                    flow["priority"] = priority
                if random.random() < 0.05:
                    flow["throttle"] = ("report", random.choice((30.0, 120.0)))
                drawn[work_id] = flow
            args.update(drawn[work_id])
        # Backlogs: twice a run the noisy tenant submits a batch at one moment, and small
        # tenants a few Works within the same minute, then Works without keys: four of
        # scope root (the flow "") and last two of team-b (its weighted flow, which starts
        # them ahead of the flow "" backlog) (fair share and the starvation bound are
        # contended only while several flows have Work ready at once).
        for batch in range(2):
            at = self._at(0.8)
            for i in range(24):
                tenant = "tenant:big" if i < 14 else random.choice(("tenant:a", "tenant:b"))
                work_id = f"b{batch}-{i}"
                self.work_ids.append(work_id)
                self.submitted_at[work_id] = moment = round(at + (i >= 14) * 30.0 * i / 24, 3)
                submit: dict[str, Any] = {
                    "work_id": work_id,
                    "binding": random.choice(("calls-retry", "jobs-retry", "eager-retry")),
                    "scope": random.choice(("root", "team-b")),
                    "safety": "idempotent",
                    "payload": {"batch": batch, "n": i},
                    "keys": [tenant],
                }
                if i >= 18:  # without keys: the scope's flow
                    submit.update(scope=("root", "team-b")[i >= 22], keys=[])
                if random.random() < 0.2:
                    submit["priority"] = random.choice((5, -5))
                self.add(moment, "submit", **submit)
        self._draw_coalescing()

    def _draw_coalescing(self) -> None:
        """Debounce and unique submits (after every other draw): twice a run a burst of 6
        submits on one debounce key within 90 s (wait 20 s, at most 60 s), and 4 submits
        under one unique key (`until_terminal`) spread over the run."""
        random = self.random
        for burst in range(2):
            at = self._at(0.8)
            for i in range(6):
                work_id = f"d{burst}-{i}"
                self.work_ids.append(work_id)
                self.submitted_at[work_id] = moment = round(at + 15.0 * i, 3)
                self.add(
                    moment,
                    "submit",
                    work_id=work_id,
                    binding=random.choice(("calls-retry", "jobs-retry")),
                    scope="root",
                    safety="idempotent",
                    payload={"burst": burst, "n": i},
                    debounce=(f"sync:{burst}", 20.0, 60.0),
                )
        for i in range(4):
            work_id = f"u{i}"
            self.work_ids.append(work_id)
            self.submitted_at[work_id] = moment = self._at(0.9)
            self.add(
                moment,
                "submit",
                work_id=work_id,
                binding="calls-retry",
                scope="root",
                safety="idempotent",
                payload={"unique": i},
                unique=("report:daily", "until_terminal"),
            )
