"""Generate the golden histories: `python -P tests/histories/make_histories.py [--check]`.

Each history is a real scenario driven through `rota.open(...)` with a `ManualClock` and
in-process executors, exported with `rota.replay.export.export_to_file` as
`tests/histories/<name>.jsonl`. `expected.json` records, for each one, its event count,
head hash, the scheduler projection digest after replaying it from position 0, the final
facts of every Work (state, attempt outcomes, pending input, holds, controls) and a digest
per Work, plus the config it was written under. `divergent.jsonl` is a copy of `lifecycle`
with one payload altered and the chain recomputed: it verifies, but replays to another
digest (`tests/integration/test_golden_histories.py` checks that replay catches it).

The files must be byte-identical from one run to the next: times come from the manual
clock, the owner is fixed, the store id in the export header is pinned (a fresh store gets
a random one), and every background step of the host (adoption, stop evidence, control
delivery) runs on the ticking thread (`SyncLauncher`). `--check` regenerates into a
temporary folder and compares it with the committed files instead of writing them.

Never edit the files by hand; regenerate them, and say in the commit message why they
changed (see README.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import filecmp
import hashlib
import json
import logging
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

import rota
from rota.application.ports import Done
from rota.application.timestamps import parse_timestamp
from rota.domain.state import WorkState
from rota.infrastructure.chain import GENESIS, canonical_envelope, link
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections.scheduler import SchedulerProjection
from rota.projections.work_rows import WorkCodec
from rota.replay.export import (
    ExportHeader,
    ExportLine,
    export_to_file,
    open_export,
    read_header,
    read_records,
)

HERE = Path(__file__).resolve().parent
OWNER = "golden-host"
EXPECTED = "expected.json"
DIVERGENT = "divergent"
REGENERATE = "python -P tests/histories/make_histories.py"
WAIT = 10.0  # seconds of real time a background callable may take to answer
STOP_RECHECK = 5.1  # the host asks for stop evidence again after min(5 s, lease) of real time

# -- shared with tests/integration/test_golden_histories.py -------------------------------


def work_facts(work: WorkState) -> dict[str, Any]:
    """What a person checks of a Work: its state, each attempt's outcome, what is left."""
    facts: dict[str, Any] = {
        "state": work.state,
        "attempts": [a.outcome or a.status for a in work.attempts],
        "pending": len(work.pending),
    }
    if work.retry.failures or work.retry.blocked_reason:
        facts["failures"] = work.retry.failures
        facts["blocked_reason"] = work.retry.blocked_reason
    if work.holds:
        facts["holds"] = [h.kind for h in work.holds]
    if work.controls:
        facts["controls"] = [f"{c.kind}:{c.state}" for c in work.controls]
    return facts


def work_digest(work: WorkState) -> str:
    """SHA-256 of one Work's state as the projection stores it (its lean row: a field at
    its default is left out, so a field added later with a default leaves the digests of
    Works written before it unchanged), to name the first Work a replay disagrees on."""
    return hashlib.sha256(WorkCodec().encode(work)).hexdigest()


def replay(path: Path) -> tuple[SchedulerProjection, int, str]:
    """Fold an export into a fresh projection: (projection, events, last hash)."""
    projection = SchedulerProjection()
    count, head = 0, GENESIS.hex()
    with open_export(path) as src:
        header = read_header(src)
        for row in read_records(src, header):
            event = DEFAULT_CODEC.decode(row.type, row.type_version, row.data, row.position)
            at = parse_timestamp(row.recorded_at)
            projection.apply(row.position, row.stream, row.version, at, event)
            count, head = count + 1, row.hash
    return projection, count, head


# -- driving a scheduler deterministically -------------------------------------------------


class SyncLauncher(concurrent.futures.Executor):
    """Runs the host's background steps at once, on the ticking thread, in a fixed order."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class Scripted(rota.Executor):
    """An executor whose attempts do what the script says: finish at once, or hang.

    A hanging attempt is a process that exits a moment after its stop signal: the first
    `stop` only signals it ("unknown"), the next one finds it gone ("stopped"). An
    `interrupt` ends it at once. Either way its `done` is called (the result is refused:
    the attempt is already fenced). `recover` answers "stopped" (a crashed process whose
    work is gone).
    """

    capabilities = frozenset({"stop", "interrupt", "inject", "recover"})

    def __init__(self, name: str, plan: dict[int, rota.Result]) -> None:
        self.name, self.plan = name, plan
        self.hanging: dict[str, Done] = {}
        self.signalled: set[str] = set()

    def launch(self, ctx: rota.LaunchContext, done: Done) -> None:
        result = self.plan.get(ctx.attempt)
        if result is None:
            self.hanging[ctx.execution_id] = done
        else:
            done(result)

    def finish(self, execution_id: str, result: rota.Result) -> None:
        """The hanging attempt ends on its own with `result`."""
        self.hanging.pop(execution_id)(result)

    def _end(self, execution_id: str) -> bool:
        done = self.hanging.pop(execution_id, None)
        if done is not None:
            done(rota.Result(outcome="failed", error_code="stopped"))
        return done is not None

    def recover(self, ctx: rota.LaunchContext, metadata: Any, done: Done) -> Any:
        self.hanging.pop(ctx.execution_id, None)
        return "stopped"

    def stop(self, execution_id: str, epoch: int, metadata: Any) -> Any:
        if execution_id in self.hanging and execution_id not in self.signalled:
            self.signalled.add(execution_id)
            return "unknown"
        self._end(execution_id)
        return "stopped"

    def interrupt(self, execution_id: str, epoch: int) -> bool:
        return self._end(execution_id)


class Golden:
    """One scenario: a scheduler on a fresh store, its manual clock, and how to drive it."""

    def __init__(self, path: Path, start: datetime, config: dict[str, Any]) -> None:
        self.start = start
        self.clock = ManualClock(start)
        self.s = rota.open(path, clock=self.clock, config=config, owner=OWNER)
        self.s.host.launches.pool.shutdown()
        self.s.host.launches.pool = SyncLauncher()

    def at(self, seconds: float) -> None:
        """Move the clock to `seconds` after the scenario's start (never backwards)."""
        when = self.start + timedelta(seconds=seconds)
        assert when >= self.clock.now(), f"the clock would go back to {when}"
        self.clock.set(when)

    def step(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)

    def wait_result(self) -> None:
        """Wait (real time) until a callable running on a thread has reported its result."""
        deadline = time.monotonic() + WAIT
        while self.s.host.results.empty():
            if time.monotonic() > deadline:
                raise RuntimeError("no result arrived from a running callable")
            time.sleep(0.005)

    def drain(self, passes: int = 50) -> None:
        """Tick until idle, or until a pass changes nothing and no result is on its way
        (what is left waits for the clock or a stop check). A callable running on a thread
        is awaited before the next pass, so its result lands at the same point every run."""
        host = self.s.host
        for _ in range(passes):
            before = self.s.store.head().position
            self.s.tick()
            if host.idle():
                return
            if host.results.empty():
                if any(not isinstance(h.executor, Scripted) for h in host.held.values()):
                    self.wait_result()
                elif self.s.store.head().position == before:
                    return
        raise RuntimeError(f"still busy after {passes} passes")

    def recheck_stops(self) -> None:
        """Let the host's real-time pause between two stop checks pass, then drain."""
        time.sleep(STOP_RECHECK)
        self.drain()

    def state(self, work_id: str) -> str:
        return self.s.service.projection.works[work_id].state

    def expect(self, **states: str) -> None:
        """Assert Work states (`bill_3="held"` names the Work `bill-3`)."""
        got = {w: self.state(w.replace("_", "-")) for w in states}
        assert got == states, f"{got} != {states}"


# -- the scenarios ---------------------------------------------------------------------------


def lifecycle(g: Golden) -> None:
    """Run-once completions, a standing Work, turns with correlation keys, a park/resume."""
    s = g.s
    s.register("greet", lambda ctx: {"greeting": f"hello {ctx.trigger['name']}"}, inline=True)
    s.register("echo", lambda ctx: {"inputs": ctx.inputs}, inline=True)

    def converse(ctx: rota.LaunchContext) -> Any:
        text = ctx.trigger["text"]
        return {"core.turn.v1": {"status": "replied", "comment": f"re: {text}"}, "said": text}

    def chat(ctx: rota.LaunchContext) -> rota.Result:
        if any(i.get("say") == "bye" for i in ctx.inputs):
            return rota.Result(data={"heard": [i["say"] for i in ctx.inputs]})
        return rota.Result(outcome="waiting", data={"heard": [i["say"] for i in ctx.inputs]})

    def build(ctx: rota.LaunchContext) -> Any:
        with ctx.phase("fetch"):
            ctx.persist_recovery({"checkout": f"/src/{ctx.work_id}"})
        with ctx.phase("compile"):
            pass
        return {"artifact": f"{ctx.work_id}.whl"}

    s.register("converse", converse, inline=True)
    s.register("chat", chat, inline=True)
    s.register("build", build, inline=True)
    s.register(
        "desk", lambda ctx: rota.Result(outcome="handoff", data={"to": "a human"}), inline=True
    )

    s.submit("greet-ada", binding="greet", input={"name": "Ada"})
    s.submit("greet-ada", binding="greet", input={"name": "Ada"})  # the same: a no-op
    g.step()
    s.submit("greet-bob", binding="greet", input={"name": "Bob"}, input_key="bob-1")
    g.step()
    g.drain()
    g.expect(greet_ada="completed", greet_bob="completed")

    g.at(60)
    s.submit("inbox", binding="echo", kind="standing")
    g.step()
    s.accept("inbox", {"n": 1}, key="m1")
    s.accept("inbox", {"n": 2}, key="m2")
    g.step()
    g.drain()
    s.accept("inbox", {"n": 2}, key="m2")  # a key already accepted: nothing queued
    s.accept("inbox", {"n": 3}, key="m3")
    g.step()
    g.drain()
    g.expect(inbox="idle")

    g.at(120)
    s.submit(
        "agent",
        binding="converse",
        kind="standing",
        input={"text": "hello"},
        input_key="t1",
        correlation_key="thread-42",
    )
    g.step()
    g.drain()
    s.accept("agent", {"text": "and you?"}, key="t2", correlation_key="thread-43")
    g.step()
    g.drain()

    g.at(180)
    s.submit("chat", binding="chat", input={"say": "hi"}, input_key="c1")
    g.step()
    g.drain()
    g.expect(chat="waiting")
    g.step(30)
    s.accept("chat", {"say": "bye"}, key="c2")
    g.step()
    g.drain()
    g.expect(chat="completed")

    g.at(240)
    s.submit("build", binding="build")
    g.step()
    g.drain()
    s.submit("desk", binding="desk", kind="standing", input={"ask": "refund"}, input_key="q1")
    g.step()
    g.drain()
    g.expect(build="completed")


def merged_lifecycle(g: Golden) -> None:
    """`lifecycle`, then the first input of a standing Work (carried by its definition)
    accepted again under its key: the same input, a no-op that records nothing."""
    lifecycle(g)
    s = g.s
    g.at(300)
    before = s.store.head().position
    again = s.accept("agent", {"text": "hello"}, key="t1", correlation_key="thread-42")
    defined = next(e for e in s.events() if e.stream == "work/agent")
    assert (defined.type, again) == ("core.work.submitted", defined.position)
    assert s.store.head().position == before, "a repeated first input was queued again"


def retries(g: Golden) -> None:
    """Default delays, a hinted retry, retry-unknown, a permanent failure and its manual
    retry, and a Work that exhausts its budget."""
    s, clock = g.s, g.clock

    def flaky(ctx: rota.LaunchContext) -> Any:
        if ctx.attempt < 3:
            raise rota.Fail("upstream_down", "the payment service did not answer")
        return {"charged": ctx.trigger["amount"]}

    def hinted(ctx: rota.LaunchContext) -> Any:
        if ctx.attempt == 1:
            retry_at = clock.now() + timedelta(seconds=90)
            raise rota.Fail("rate_limited", "the provider asked for 90 s", retry_at=retry_at)
        return "sent"

    def busy(ctx: rota.LaunchContext) -> Any:
        if ctx.attempt == 1:
            raise rota.Fail("provider_busy", retry_unknown=True)
        return "done"

    def over_limit(ctx: rota.LaunchContext) -> Any:
        if ctx.attempt == 1:
            raise rota.Fail("over_limit", "500 is above the limit", permanent=True)
        return {"charged": 500}

    def broken(ctx: rota.LaunchContext) -> Any:
        raise RuntimeError("secret provider output that must never be stored")

    s.register("flaky", flaky, inline=True)
    s.register("hinted", hinted, inline=True)
    s.register("busy", busy, inline=True)
    s.register("over-limit", over_limit, inline=True)
    s.register("broken", broken, inline=True, retry=rota.RetryPolicy(max_attempts=2, delays=(60,)))

    s.submit("order-1", binding="flaky", input={"amount": 30}, input_key="order-1")
    s.submit("notify", binding="hinted", input={"to": "ada"})
    s.submit("sync", binding="busy")
    s.submit("order-2", binding="over-limit", input={"amount": 500}, input_key="order-2")
    s.submit("nightly", binding="broken")
    g.step()
    g.drain()
    g.expect(order_1="retry_wait", notify="retry_wait", sync="retry_wait")
    g.expect(order_2="failed", nightly="retry_wait")

    g.at(30)
    s.retry("order-2", reason="the limit was raised", requested_by="ops")
    g.step()
    g.drain()
    g.expect(order_2="completed")

    # The timers: nightly (60 s), notify (its 90 s hint + 2 min), order-1 (5 then 10 min),
    # sync (retry-unknown: 30 min).
    for seconds in (61, 300, 301, 901, 1801):
        g.at(seconds)
        g.drain()
    g.expect(order_1="completed", notify="completed", sync="completed", nightly="failed")


def recovery(g: Golden) -> None:
    """A relaunch, an adoption, a lost idempotent attempt retried, a crash loop held and
    released, and a timeout whose stop is confirmed."""
    s = g.s
    s.register("job", lambda ctx: {"ran": ctx.epoch}, inline=True)

    # A claim whose executor was never called (the host died in between): relaunched.
    s.submit("relaunched", binding="job")
    s.service.lifecycle.start_pass()
    g.step(61)
    g.drain()
    g.expect(relaunched="completed")

    # A call still running when its lease lapsed: adopted, never run again.
    release = threading.Event()

    def slow(ctx: rota.LaunchContext) -> str:
        assert release.wait(WAIT)
        return "finished"

    s.register("slow", slow)
    g.at(120)
    s.submit("adopted", binding="slow")
    s.tick()
    g.step(61)  # no renewal: the lease lapses while the call runs
    s.tick()
    assert s.service.projection.works["adopted"].attempts[0].epoch == 2
    release.set()
    g.wait_result()
    g.step()
    g.drain()
    g.expect(adopted="completed")

    # An idempotent Work whose process vanished: lost, and retried (retry_on_lost).
    vanishing = Scripted("vanishing", {2: rota.Result(data="second try")})
    s.register("vanishing", executor=vanishing, retry=rota.RetryPolicy(retry_on_lost=True))
    g.at(240)
    s.submit("lost", binding="vanishing", safety="idempotent")
    s.tick()
    g.step(61)
    s.tick()
    g.expect(lost="retry_wait")
    g.step(300)
    g.drain()
    g.expect(lost="completed")

    # A claim lost before every launch: held after crash_loop_limit relaunches, released.
    g.at(900)
    s.submit("crashy", binding="job")
    s.service.lifecycle.start_pass()
    for _ in range(3):  # two relaunch claims, then the hold
        g.step(61)
        s.service.recovery.recovery_pass()
    g.expect(crashy="held")
    g.step(60)
    s.release("crashy", by="ops")
    g.step()
    g.drain()
    g.expect(crashy="completed")

    # A call past its deadline: timed out, stopped (evidence confirmed), retried.
    stuck = Scripted("stuck", {2: rota.Result(data="in time")})
    s.register("stuck", executor=stuck, timeout_seconds=90)
    g.at(1500)
    s.submit("stuck", binding="stuck")
    s.tick()
    for _ in range(3):
        g.step(31)  # renewals at a third of the lease, then the deadline passes
        s.tick()
    g.expect(stuck="retry_wait")
    g.step()
    g.recheck_stops()
    assert s.service.projection.works["stuck"].attempts[0].stop_confirmed
    g.step(300)
    g.drain()
    g.expect(stuck="completed")


ADMISSION_CONFIG: dict[str, Any] = {
    "settings": {"concurrency": 1, "job_concurrency": 1},
    "scopes": [{"path": "root/team", "limits": {"concurrency": 1}}],
    "budgets": [
        {
            "id": "two-turns",
            "unit": "turns",
            "max": 2,
            "per": "work",
            "scope": "root/metered",
            "warn_at": 0.5,
        },
        {"id": "usd-billing", "unit": "usd", "max": 5, "per": "scope", "scope": "root/billing"},
    ],
}


def admission(g: Golden) -> None:
    """Pools, a scope limit, budgets (warning, exceeded, held, released), start gates."""
    s = g.s
    s.register("agent", lambda ctx: "agent done", inline=True)
    s.register("job", lambda ctx: "job done", pool="jobs", inline=True)
    s.register("bill", lambda ctx: rota.Result(data="billed", usage={"usd": 3.0}), inline=True)

    for name in ("a1", "a2"):
        s.submit(name, binding="agent")
    for name in ("j1", "j2"):
        s.submit(name, binding="job")
    g.step()
    s.tick()
    g.expect(a1="running", a2="ready", j1="running", j2="ready")
    g.drain()

    g.at(60)
    s.submit("deep", binding="agent", scope="root/team/project")
    s.submit("sibling", binding="job", scope="root/team/other")
    s.submit("outside", binding="job", scope="root/elsewhere")
    g.step()
    s.tick()
    g.expect(deep="running", sibling="ready", outside="running")
    g.drain()

    g.at(120)
    s.submit("metered", binding="agent", scope="root/metered", kind="standing")
    for n in (1, 2, 3):
        s.accept("metered", n, key=str(n))
        g.step()
        g.drain()
    g.expect(metered="held")
    s.accept("metered", 4, key="4")  # input keeps queueing while held
    g.step()
    s.release("metered", by="ops")
    g.step()
    g.drain()  # exactly one turn let through
    s.accept("metered", 5, key="5")
    g.step()
    g.drain()
    g.expect(metered="held")
    s.cancel("metered", reason="done with it", by="ops")

    g.at(180)
    for name in ("bill-1", "bill-2", "bill-3"):
        s.submit(name, binding="bill", scope="root/billing")
        g.step()
        g.drain()
    g.expect(bill_3="held")
    g.step()
    s.release("bill-3", by="ops")
    g.step()
    g.drain()
    g.expect(bill_3="completed")

    def approval(work: WorkState, binding: Any, first: Any) -> str | None:
        return "needs a human" if work.work_id.startswith("gated-") else None

    s.register_gate("approval", approval)
    g.at(240)
    s.submit("gated-ok", binding="agent")
    s.submit("gated-no", binding="agent")
    s.submit("ungated", binding="agent")
    g.step()
    g.drain()
    g.expect(gated_ok="held", gated_no="held", ungated="completed")
    g.step(60)
    s.settle_gate("gated-ok", "approval", admit=True, reason="looks fine")
    g.step()
    s.settle_gate("gated-no", "approval", admit=False, reason="refused by policy")
    g.step()
    g.drain()
    g.expect(gated_ok="completed", gated_no="cancelled")


def control(g: Golden) -> None:
    """An injected input consumed, one accepted then run by the next attempt, an interrupt
    and a cancel of running attempts."""
    s = g.s

    def conversation(ctx: rota.LaunchContext) -> rota.Result:
        position, payload = ctx.injected.get(timeout=WAIT)
        return rota.Result(data={"heard": payload}, consumed=[position])

    s.register("talk", conversation)
    s.submit("talk", binding="talk")
    s.tick()
    g.expect(talk="running")
    g.step()
    s.inject("talk", {"say": "hello"}, key="m1", by="ops")
    g.step()
    s.tick()  # dispatched and accepted
    g.wait_result()
    g.step()
    g.drain()
    g.expect(talk="completed")

    release = threading.Event()

    def job(ctx: rota.LaunchContext) -> Any:
        if ctx.attempt == 1:
            assert release.wait(WAIT)
        return {"inputs": ctx.inputs}

    s.register("job", job)
    g.at(60)
    s.submit("later", binding="job", input="first", input_key="first")
    s.tick()
    g.step()
    s.inject("later", "second", key="m2", by="ops")
    g.step()
    s.tick()  # accepted, not consumed
    release.set()
    g.wait_result()
    g.step()
    g.drain()
    g.expect(later="completed")

    patient = Scripted("patient", {2: rota.Result(data="after the interrupt")})
    s.register("patient", executor=patient)
    g.at(120)
    s.submit("patient", binding="patient")
    s.tick()
    g.step()
    s.interrupt("patient", by="ops")
    g.step()
    g.drain()  # the stop is asked for, the interrupt delivered
    g.step()
    g.recheck_stops()  # the stop verified, the next attempt runs
    g.expect(patient="completed")

    deaf = Scripted("deaf", {2: rota.Result(data="heard it the second time")})
    s.register("deaf", executor=deaf)
    g.at(150)
    s.submit("deaf", binding="deaf")
    s.tick()
    g.step()
    s.inject("deaf", "hello?", key="m3", by="ops")
    g.step()
    s.tick()  # dispatched, not accepted: the input stays queued
    g.step()
    deaf.finish("deaf/1", rota.Result(data="never heard it"))
    g.drain()
    g.expect(deaf="completed")

    doomed = Scripted("doomed", {})
    s.register("doomed", executor=doomed)
    g.at(180)
    s.submit("doomed", binding="doomed")
    s.tick()
    g.step()
    s.cancel("doomed", reason="no longer needed", by="ops")
    g.step()
    g.drain()
    g.step()
    g.recheck_stops()
    g.expect(doomed="cancelled")
    assert s.service.projection.works["doomed"].attempts[0].stop_confirmed


Scenario = Callable[[Golden], None]
HISTORIES: dict[str, tuple[Scenario, datetime, dict[str, Any]]] = {
    "lifecycle": (lifecycle, datetime(2026, 3, 2, 9, tzinfo=UTC), {}),
    "retries": (retries, datetime(2026, 3, 3, 9, tzinfo=UTC), {}),
    "recovery": (
        recovery,
        datetime(2026, 3, 4, 9, tzinfo=UTC),
        {"settings": {"crash_loop_limit": 2}},
    ),
    "admission": (admission, datetime(2026, 3, 5, 9, tzinfo=UTC), ADMISSION_CONFIG),
    "control": (control, datetime(2026, 3, 6, 9, tzinfo=UTC), {}),
    # The same scenarios in the shape of three events a job (issue 33): a Work's definition
    # carries its first input (`core.work.submitted` v3) and a claim launched at once its
    # invoke marker (`core.execution.claimed` v2). The five above keep the older shape.
    "merged_lifecycle": (merged_lifecycle, datetime(2026, 12, 8, 9, tzinfo=UTC), {}),
    "merged_recovery": (
        recovery,
        datetime(2026, 12, 8, 10, tzinfo=UTC),
        {"settings": {"crash_loop_limit": 2}},
    ),
}

# The divergent copy: lifecycle with greet-bob's completed data altered.
DIVERGENT_OF = "lifecycle"
DIVERGENT_WORK = "greet-bob"
DIVERGENT_FROM, DIVERGENT_TO = '"hello Bob"', '"hello Rob"'


# -- writing --------------------------------------------------------------------------------


def generate(name: str, out: Path, work: Path) -> dict[str, Any]:
    scenario, start, config = HISTORIES[name]
    db = work / f"{name}.db"
    g = Golden(db, start, config)
    with g.s:
        scenario(g)
        g.s.service.catch_up()
        assert not g.s.host.held, f"{name}: attempts still held at the end: {g.s.host.held}"
        live = g.s.service.projection.digest()
        end = g.clock.now()
    store = SQLiteStore(db)
    try:
        pinned = str(uuid.uuid5(uuid.NAMESPACE_URL, f"rota:golden-history:{name}"))
        store.write(
            lambda c: c.execute("UPDATE rota_meta SET value = ? WHERE key = 'store_id'", (pinned,))
        )
        header = export_to_file(store, out / f"{name}.jsonl")
    finally:
        store.close()
    return record(out / f"{name}.jsonl", header, live, end, config)


def record(
    path: Path, header: ExportHeader, live: str | None, end: datetime, config: dict[str, Any]
) -> dict[str, Any]:
    projection, count, head = replay(path)
    digest = projection.digest()
    assert count == header.head_position and head == header.head_hash
    assert live is None or digest == live, f"{path.name}: replay {digest} != live {live}"
    works = projection.works
    return {
        "file": path.name,
        "events": count,
        "head_hash": head,
        "digest": digest,
        "end": end.isoformat().replace("+00:00", "Z"),
        "config": config,
        "works": {w: work_facts(works[w]) for w in sorted(works)},
        "work_digests": {w: work_digest(works[w]) for w in sorted(works)},
    }


def make_divergent(source: Path, target: Path) -> int:
    """Copy `source` with one payload altered and every later hash recomputed."""
    encoder = msgspec.json.Encoder()
    with open_export(source) as src:
        header = read_header(src)
        rows = list(read_records(src, header))
    altered = next(
        r
        for r in rows
        if r.type == "core.execution.completed"
        and r.stream == f"work/{DIVERGENT_WORK}"
        and isinstance(r.data, str)
        and DIVERGENT_FROM in r.data
    )
    previous = bytes.fromhex(header.previous_hash)
    lines: list[bytes] = []
    for r in rows:
        data = r.data
        assert isinstance(data, str)
        if r.position == altered.position:
            data = data.replace(DIVERGENT_FROM, DIVERGENT_TO)
        envelope = (r.position, r.stream, r.version, r.type, r.type_version, r.delivery_id)
        previous = link(previous, canonical_envelope(*envelope, r.recorded_at, data))
        line = ExportLine(*envelope, r.recorded_at, data, "text", previous.hex())
        lines.append(encoder.encode(line) + b"\n")
    new_header = msgspec.structs.replace(header, head_hash=previous.hex())
    target.write_bytes(encoder.encode(new_header) + b"\n" + b"".join(lines))
    return altered.position


def generate_all(out: Path) -> None:
    expected: dict[str, Any] = {
        "generated_by": REGENERATE,
        "rule": "never edit by hand; a regenerated history needs its reason in the commit",
        "histories": {},
    }
    with tempfile.TemporaryDirectory(prefix="rota-golden-") as tmp:
        for name in HISTORIES:
            expected["histories"][name] = generate(name, out, Path(tmp))
    original = expected["histories"][DIVERGENT_OF]
    path = out / f"{DIVERGENT}.jsonl"
    position = make_divergent(out / original["file"], path)
    with open_export(path) as src:
        header = read_header(src)
    divergent = record(path, header, None, parse_timestamp(original["end"]), original["config"])
    assert divergent["digest"] != original["digest"]
    divergent.update(
        copy_of=DIVERGENT_OF,
        altered_position=position,
        altered_work=DIVERGENT_WORK,
        altered=f"{DIVERGENT_WORK}'s completed data {DIVERGENT_FROM} -> {DIVERGENT_TO}",
    )
    expected["divergent"] = divergent
    text = json.dumps(expected, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (out / EXPECTED).write_text(text, encoding="utf-8")


def generate_some(out: Path, names: list[str]) -> None:
    """Write the histories `names` and their entries in expected.json; every other history
    and entry stays as it is (a new history is added without rewriting the old ones)."""
    expected = json.loads((out / EXPECTED).read_text("utf-8"))
    with tempfile.TemporaryDirectory(prefix="rota-golden-") as tmp:
        for name in names:
            expected["histories"][name] = generate(name, out, Path(tmp))
    text = json.dumps(expected, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (out / EXPECTED).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--check", action="store_true", help="compare a fresh generation with the files"
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: here)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(HISTORIES),
        help="write only these histories (and their entries in expected.json), keeping the others",
    )
    args = parser.parse_args(argv)
    # The failing callables' tracebacks are expected; keep the output to the verdict.
    logging.getLogger("rota.executor").setLevel(logging.ERROR)
    if args.only:
        generate_some(args.out, args.only)
        print(f"wrote {', '.join(args.only)} and their entries in {EXPECTED} into {args.out}")
        return 0
    if not args.check:
        generate_all(args.out)
        print(f"wrote {len(HISTORIES) + 1} histories and {EXPECTED} into {args.out}")
        return 0
    with tempfile.TemporaryDirectory(prefix="rota-golden-check-") as tmp:
        fresh = Path(tmp)
        generate_all(fresh)
        names = sorted(p.name for p in fresh.iterdir())
        _, mismatch, errors = filecmp.cmpfiles(args.out, fresh, names, shallow=False)
    for name in [*mismatch, *errors]:
        print(f"differs from a fresh generation: {name}", file=sys.stderr)
    return 1 if mismatch or errors else 0


if __name__ == "__main__":
    sys.exit(main())
