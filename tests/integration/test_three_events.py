"""Three events a job (issue 33), through a real scheduler and store: a Work's definition
carries its first input, a claim its invoke marker. The carried input keeps its delivery
identity and position (a retried submit or an input with its key is a duplicate, another
payload under the key is refused), is what a claim consumes, is sealed and pruned as any
input; the merged marker is adopted on recovery; the older shape of a job still folds,
explains and logs the same."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

import rota
from rota.application.errors import ConcurrencyConflict
from rota.application.ports import NewEvent
from rota.domain.emit import Emit
from rota.domain.events import (
    AttemptClaimed,
    CarriedInput,
    InputAccepted,
    Invoked,
    RetentionPolicy,
    WorkSubmitted,
)
from rota.domain.personal import MARKER
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.decision_lines import DECISIONS, FIELDS_ATTRIBUTE
from rota.infrastructure.stores import open_store
from rota.replay import retention
from rota.replay.audit import verify_chain
from rota.replay.explain import explain, work_story
from rota.replay.rebuild import folded

T0 = datetime(2026, 12, 8, 9, tzinfo=UTC)


def clock() -> ManualClock:
    return ManualClock(T0)


def types_of(s: rota.Scheduler, work_id: str) -> list[tuple[str, int]]:
    """The Work's stream as (type, type version), from the stored rows."""
    rows = s.store.read_raw(0, 10_000)
    return [(r.type, r.type_version) for r in rows if r.stream == f"work/{work_id}"]


def test_a_no_op_job_is_three_events(memory_url: str) -> None:
    with rota.open(memory_url, clock=clock()) as s:
        s.register("job", lambda ctx: None, inline=True)
        handle = s.submit("w", binding="job", input={"n": 1}, input_key="k1")
        s.run_until_idle()
        assert types_of(s, "w") == [
            ("core.work.submitted", 3),
            ("core.execution.claimed", 2),
            ("core.execution.completed", 1),
        ]
        defined, claim, _ = [r for r in s.store.read(0, 100) if r.stream == "work/w"]
        assert defined.delivery_id == "input/w/k1"
        assert isinstance(defined.event, WorkSubmitted) and defined.event.input is not None
        assert isinstance(claim.event, AttemptClaimed)
        assert claim.event.invoked == Invoked(isolated=False)
        # The input's position is the definition's: the claim consumes it, the handle has it.
        assert (claim.event.consumed, claim.event.trigger) == ([defined.position], defined.position)
        assert handle.input_position == defined.position
        assert s.work("w").state == "completed"


def test_a_retried_submit_with_the_input_writes_nothing(memory_url: str) -> None:
    with rota.open(memory_url, clock=clock()) as s:
        s.register("job", lambda ctx: None, inline=True)
        first = s.submit("w", binding="job", input={"n": 1})
        head = s.store.head().position
        again = s.submit("w", binding="job", input={"n": 1})
        s.submit_many([{"work_id": "w", "binding": "job", "input": {"n": 1}}])
        assert s.store.head().position == head
        assert again.input_position == first.input_position
        s.run_until_idle()
        # After it ran: still the same input, nothing queued again.
        s.submit("w", binding="job", input={"n": 1})
        assert [t for t, _ in types_of(s, "w")].count("core.input.accepted") == 0
        assert len(s.work("w").attempts) == 1


def test_an_input_with_the_first_inputs_key_is_a_duplicate_or_refused(memory_url: str) -> None:
    with rota.open(memory_url, clock=clock()) as s:
        s.register("job", lambda ctx: None, inline=True)
        handle = s.submit("w", binding="job", kind="standing", input={"n": 1}, input_key="k1")
        head = s.store.head().position
        # The same input under the key: the original (the definition's position), no write.
        assert s.accept("w", {"n": 1}, key="k1") == handle.input_position
        assert s.store.head().position == head
        # Another input under the key: refused, nothing written.
        with pytest.raises(rota.DeliveryConflict) as caught:
            s.accept("w", {"n": 2}, key="k1")
        assert caught.value.code == "delivery_conflict"
        assert s.store.head().position == head
        # A submit naming both inputs: the repeated one is a no-op, the new one queued.
        s.service.lifecycle.submit(
            SubmitWork(
                work_id="w",
                binding="job",
                kind="standing",
                inputs=(WorkInput({"n": 1}, "k1"), WorkInput({"n": 2}, "k2")),
            )
        )
        assert s.store.head().position == head + 1
        assert [p.key for p in s.work("w").pending] == ["k1", "k2"]


def test_the_same_key_twice_in_one_new_submit_is_one_input(memory_url: str) -> None:
    with rota.open(memory_url, clock=clock()) as s:
        s.register("job", lambda ctx: None, inline=True)
        twice = (WorkInput({"n": 1}, "k1"), WorkInput({"n": 1}, "k1"))
        result = s.service.lifecycle.submit(SubmitWork(work_id="w", binding="job", inputs=twice))
        assert result.written == 1 and [r.position for r in result.recorded] == [1, 1]
        with pytest.raises(rota.DeliveryConflict):
            clash = (WorkInput({"n": 1}, "k1"), WorkInput({"n": 2}, "k1"))
            s.service.lifecycle.submit(SubmitWork(work_id="v", binding="job", inputs=clash))


def test_a_racing_definition_is_decided_again_not_a_delivery_conflict(memory_url: str) -> None:
    """Two writers defining one Work with the same first input key: the second append is a
    concurrency conflict (decide again: a no-op or `work_conflict`), as without the key."""
    store = open_store(memory_url)
    try:
        carried = WorkSubmitted(work_id="w", scope="root", binding="job")
        first = msgspec.structs.replace(carried, input=CarriedInput(key="k", payload=1))
        appended = store.append([NewEvent("work/w", first, "input/w/k")], {"work/w": 0})
        assert appended.written == 1
        # The same definition again: the store returns the original, writes nothing.
        repeated = store.append([NewEvent("work/w", first, "input/w/k")], {"work/w": 0})
        assert repeated.written == 0 and repeated.recorded[0].position == 1
        other = msgspec.structs.replace(first, scope="root/other")
        with pytest.raises(ConcurrencyConflict):
            store.append([NewEvent("work/w", other, "input/w/k")], {"work/w": 0})
        # An input under the key with the same payload is the carried one; another is not.
        same = InputAccepted(work_id="w", key="k", payload=1)
        assert store.append([NewEvent("work/w", same, "input/w/k")]).recorded[0].position == 1
        with pytest.raises(rota.DeliveryConflict):
            changed = InputAccepted(work_id="w", key="k", payload=2)
            store.append([NewEvent("work/w", changed, "input/w/k")])
    finally:
        store.close()


def test_a_claim_consumes_the_carried_input_then_the_later_ones(memory_url: str) -> None:
    with rota.open(memory_url, clock=clock()) as s:
        seen: list[Any] = []
        s.register("echo", lambda ctx: seen.append(ctx.inputs), inline=True)
        handle = s.submit("w", binding="echo", kind="standing", input={"n": 1}, input_key="k1")
        second = s.accept("w", {"n": 2}, key="k2")
        s.run_until_idle()
        view = s.work("w")
        assert list(view.attempts[0].consumed) == [handle.input_position, second]
        assert seen == [[{"n": 1}, {"n": 2}]]


def test_the_carried_input_is_sealed_and_opened_as_any_input(tmp_path: Path) -> None:
    canary = "canary-33@example.org"
    with rota.open(tmp_path / "app.db", config={}) as s:
        seen: list[Any] = []
        s.register("mail", lambda ctx: seen.append(ctx.trigger), inline=True)
        s.submit(
            "w", binding="mail", input={"to": {"email": canary}, "n": 1}, personal=["to.email"]
        )
        s.run_until_idle()
        assert seen == [{"to": {"email": canary}, "n": 1}]  # the job reads the plaintext
        (defined,) = [r for r in s.store.read(0, 100) if r.type == "core.work.submitted"]
        assert isinstance(defined.event, WorkSubmitted) and defined.event.input is not None
        sealed = defined.event.input.payload
        assert set(sealed["to"]["email"]) == {MARKER} and sealed["n"] == 1
    connection = apsw.Connection(str(tmp_path / "app.db"))
    rows = connection.execute("SELECT data FROM events").fetchall()
    assert not any(
        canary.encode() in bytes(d if isinstance(d, bytes) else d.encode()) for (d,) in rows
    )


def test_retention_prunes_the_carried_inputs_payload_and_keeps_its_key(tmp_path: Path) -> None:
    path = tmp_path / "rota.db"
    with rota.open(path, config={}) as s:
        s.register("greet", lambda ctx: {"hello": ctx.trigger["name"]})
        s.submit("w", binding="greet", input={"name": "ada", "pad": "y" * 2000}, input_key="k1")
        s.run_until_idle(timeout=60)
    store = open_store(str(path))
    try:
        before, _ = folded(store)
        policy = RetentionPolicy(name="all", keep_days=1)
        later = datetime.now(UTC) + timedelta(days=30)
        planned = retention.plan(store, [policy], later)
        assert planned.work_ids["all"] == ["w"]
        retention.run(store, [policy], later, tmp_path / "archive")
        assert verify_chain(store).ok
        defined = next(r for r in store.read(0, 100) if r.type == "core.work.submitted")
        assert isinstance(defined.event, WorkSubmitted) and defined.event.input is not None
        assert (defined.event.input.key, defined.event.input.payload) == ("k1", None)
        raw = next(r for r in store.read_raw(0, 100) if r.type == "core.work.submitted")
        data = raw.data.decode() if isinstance(raw.data, bytes) else raw.data
        assert data.startswith('{"$pruned":true,') and "yyyy" not in data
        after, _ = folded(store)
        work = after.works["w"]
        assert work.terminal == before.works["w"].terminal == "completed"
        assert work.attempts[0].trigger is not None
        assert (work.attempts[0].trigger.key, work.attempts[0].trigger.payload) == ("k1", None)
    finally:
        store.close()


def test_the_merged_marker_is_adopted_after_the_lease_lapsed(memory_url: str) -> None:
    the_clock = clock()
    with rota.open(memory_url, clock=the_clock, owner="host-a") as s:
        release, calls = threading.Event(), []

        def slow(ctx: rota.LaunchContext) -> str:
            calls.append(ctx.epoch)
            assert release.wait(30)
            return "finished"

        s.register("slow", slow)
        s.submit("w", binding="slow")
        s.tick()
        claim = next(r.event for r in s.store.read(0, 100) if isinstance(r.event, AttemptClaimed))
        assert claim.invoked == Invoked(isolated=False)
        assert "core.execution.invoked" not in {t for t, _ in types_of(s, "w")}
        the_clock.advance(61)  # no renewal: the lease lapses while the call runs
        report = s.tick()
        assert report.recovered == 1 and report.relaunched == 0  # adopted, never run again
        release.set()
        for _ in range(200):
            if not s.host.results.empty():
                break
            s.host.wake.wait(0.05)
            s.host.wake.clear()
        s.tick()
        view = s.work("w")
        assert view.state == "completed" and calls == [1]
        assert [seg.kind for seg in view.attempts[0].segments] == ["start", "recovered"]


def _old_shape(s: rota.Scheduler, work_id: str) -> None:
    """A Work submitted, claimed and invoked as rota wrote it before: five events."""
    stream = f"work/{work_id}"
    emits = [
        Emit(stream, WorkSubmitted(work_id=work_id, scope="root", binding="job")),
        Emit(stream, InputAccepted(work_id=work_id, key="k1"), f"input/{work_id}/k1"),
    ]
    s.service.transactions.transact(lambda: (emits, {stream: 0}))
    s.service.lifecycle.start_pass()  # a claim without its marker
    s.service.lifecycle.invoke(f"{work_id}/1", 1)  # the marker on its own


def _new_shape(s: rota.Scheduler, work_id: str) -> None:
    s.service.lifecycle.submit(
        SubmitWork(work_id=work_id, binding="job", inputs=(WorkInput(None, "k1"),))
    )
    s.service.lifecycle.start_pass(invoke=s.host.launches.invoked_with_claim)


def _told(shape: Any, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    """What the decision log, explain, the history and the fold say of one job written in
    `shape`, without the log positions (one shape has two events more)."""
    caplog.clear()
    with rota.open("memory://", clock=clock(), owner="host-a") as s:
        s.register("job", lambda ctx: None, inline=True)
        with caplog.at_level(logging.DEBUG, logger=DECISIONS):
            shape(s, "w")
        lines = [
            (getattr(r, FIELDS_ATTRIBUTE)["event"], r.getMessage())
            for r in caplog.records
            if r.name == DECISIONS and getattr(r, FIELDS_ATTRIBUTE)["work"] == "w"
        ]
        said = [(st.kind, st.text) for st in explain(s.store, "w", service=s.service).statements]
        work, history, _ = work_story(s.store, "w")
        story = history.work("w")
        (attempt,) = history.attempts_of("w")
        assert story is not None and attempt.segments[0].invoked is not None
        assert story.last_input == work.attempts[0].consumed[0].position
        segment = work.attempts[0].segments[0]
        return {
            "lines": lines,
            "explained": said,
            "inputs": story.inputs,
            "consumed": [(p.key, p.payload) for p in work.attempts[0].consumed],
            "segment": (segment.invoke, segment.isolated, work.attempts[0].status),
            "state": msgspec.structs.replace(work, version=0, attempts=()),
        }


def test_either_shape_logs_explains_and_folds_the_same(caplog: pytest.LogCaptureFixture) -> None:
    five, three = _told(_old_shape, caplog), _told(_new_shape, caplog)
    assert five == three
    assert three["lines"] == [
        ("core.work.submitted", "work submitted"),
        ("core.input.accepted", "input accepted"),
        ("core.execution.claimed", "attempt started"),
        ("core.execution.invoked", "executor invoked"),
    ]
    assert three["inputs"] == 1 and three["segment"] == ("called", False, "running")
    assert [kind for kind, _ in three["explained"]] == ["submitted", "running", "pinned", "attempt"]


def test_a_schedules_first_fire_is_carried_by_its_works_definition(memory_url: str) -> None:
    with rota.open(memory_url, clock=clock()) as s:
        s.register("job", lambda ctx: None, inline=True)
        s.schedule("tick", binding="job", every="5m")
        s.schedules.trigger_now("tick", key="k1", actor="me")
        s.schedules.trigger_now("tick", key="k2", actor="me")
        s.run_until_idle()
        (work_id,) = [w.id for w in s.works()]
        kinds = [t for t, _ in types_of(s, work_id)]
        assert kinds[0] == "core.work.submitted" and kinds.count("core.input.accepted") == 1
        fires = s.queries.activity.fires(work_id)
        assert [f.manual for f in fires] == [True, True] and len(fires) == 2
        assert fires[0].position == next(
            r.position for r in s.store.read(0, 100) if r.type == "core.work.submitted"
        )


def test_retention_of_an_older_log_is_not_blocked_by_its_definitions(tmp_path: Path) -> None:
    """A definition of an older version has no input to prune: its Work is pruned as before (its
    separate input and outcome), not left whole as a row no summary can be written for."""
    from rota.replay.export import import_export

    store = open_store(str(tmp_path / "old.db"))
    try:
        history = Path(__file__).resolve().parents[1] / "histories" / "lifecycle.jsonl"
        import_export(history, store)
        versions = {r.type_version for r in store.read_raw(0, 1000) if r.type.endswith("submitted")}
        assert versions and max(versions) < WorkSubmitted.version  # written before input rode in it
        later = datetime.now(UTC) + timedelta(days=3650)
        planned = retention.plan(store, [RetentionPolicy(name="all", keep_days=1)], later)
        assert "greet-ada" in planned.work_ids["all"]
        pruned = {p for p, _, _ in planned.rows["all"]}
        types = {r.position: r.type for r in store.read_raw(0, 1000)}
        assert {types[p] for p in pruned} >= {"core.input.accepted", "core.execution.completed"}
        assert "core.work.submitted" not in {types[p] for p in pruned}
    finally:
        store.close()
