"""Retention prunes on every store: audit tells pruned from tampered, folds keep the Work
states, a crash at any step is finished by the next run, plan counts what run prunes, and
SQLite gives the freed pages back."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
import pytest
from postgres import schema_url, temporary_schema

import rota
from rota.application.ports import EventStore
from rota.domain.events import RetentionPolicy
from rota.infrastructure.retention_summary import is_pruned
from rota.infrastructure.stores import open_store
from rota.replay import retention
from rota.replay.audit import iter_raw, verify_chain
from rota.replay.rebuild import folded

WORKS = 8
LATER = datetime.now(UTC) + timedelta(days=120)
POLICY = RetentionPolicy(name="terminal-payloads", keep_days=90)


def _greet(ctx: rota.LaunchContext) -> Any:
    name = ctx.trigger["name"]
    if name.endswith("3"):
        raise rota.Fail("no_greeting", "three is unlucky", permanent=True)
    return {"hello": name, "padding": "x" * 20000}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "source.db"
    with rota.open(path, config={}) as scheduler:
        scheduler.register("greet", _greet)
        for i in range(WORKS):
            scheduler.submit(f"w{i}", binding="greet", input={"name": f"n{i}", "pad": "y" * 20000})
        scheduler.run_until_idle(timeout=60)
    return path


def _copy(source: Path, tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    for file in source.parent.glob(source.name + "*"):
        shutil.copy(file, tmp_path / file.name.replace(source.name, path.name))
    return path


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def store(request: pytest.FixtureRequest, source: Path, tmp_path: Path) -> Iterator[EventStore]:
    if request.param == "sqlite":
        log = open_store(str(_copy(source, tmp_path)))
        yield log
        log.close()
        return
    rows = list(iter_raw(open_store(str(source), create=False)))
    if request.param == "memory":
        log = open_store(f"memory://retention-{tmp_path.name}")
        log.append_raw(rows)
        yield log
        log.close()
        return
    with temporary_schema() as schema:
        log = open_store(schema_url(schema))
        log.append_raw(rows)
        yield log
        log.close()


def _states(store: EventStore, upto: int | None = None) -> dict[str, Any]:
    scheduler, _ = folded(store, upto)
    return {
        w: (s.terminal, [(a.number, a.status) for a in s.attempts])
        for w, s in sorted(scheduler.works.items())
    }


def test_prune_keeps_chain_proofs_and_work_states(store: EventStore, tmp_path: Path) -> None:
    before = _states(store)
    head = store.head().position
    planned = retention.plan(store, [POLICY], LATER)
    terminal = sum(1 for state, _ in before.values() if state is not None)
    assert terminal >= WORKS - 1 and planned.policies[0].works == terminal
    assert planned.events > 0 and planned.policies[0].bytes_freed > 0
    result = retention.run(store, [POLICY], LATER, tmp_path / "archive")
    assert result.events == planned.events
    assert result.bytes_freed == planned.policies[0].bytes_freed
    report = verify_chain(store)
    assert report.ok, report.reason
    assert report.pruned == planned.events and report.prunes == 1
    assert report.pruned_summary == (
        f"{planned.events} events pruned by 1 prune(s) (policy terminal-payloads)"
    )
    assert _states(store, head) == before  # the summaries fold to the same Work states
    # The log still extends the checkpoint the prune wrote (same root as its event).
    from rota.replay.checkpoint import load_all

    (checkpoint,) = load_all(tmp_path / "archive" / "checkpoints")
    against = verify_chain(store, checkpoint=checkpoint)
    assert against.ok and against.checkpoint_ok, against.checkpoint_reason
    # The archive holds every original payload, each with a proof to the recorded root.
    (name,) = result.archives
    lines = (tmp_path / "archive" / name).read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "rota-archive/1" and len(lines) - 1 == planned.events
    assert all(not is_pruned(json.loads(line)["data"]) for line in lines[1:])
    # Each archived event with the checkpoint is a proof the standalone verifier accepts.
    from rota.replay.retention_archive import inclusion_proofs
    from rota.verify import verify_inclusion

    proofs = inclusion_proofs(tmp_path / "archive" / name)
    assert len(proofs) == planned.events
    for proof in proofs:
        verified = verify_inclusion(proof, None, allow_unsigned=True)
        assert verified.position == proof["position"]
    # Nothing is left to prune; a second run does nothing.
    again = retention.run(store, [POLICY], LATER, tmp_path / "archive")
    assert again.prunes == [] and again.events == 0


def test_policy_not_due_prunes_nothing(store: EventStore, tmp_path: Path) -> None:
    planned = retention.plan(store, [POLICY], datetime.now(UTC))
    assert planned.events == 0
    scoped = RetentionPolicy(name="other", keep_days=1, scope="elsewhere")
    assert retention.plan(store, [scoped], LATER).events == 0


@pytest.mark.parametrize("step", ["checkpoint", "archive", "recorded", "rewrite"])
def test_crash_at_each_step_then_rerun_completes(
    store: EventStore, tmp_path: Path, step: str
) -> None:
    planned = retention.plan(store, [POLICY], LATER)

    def fault(name: str) -> None:
        if name == step:
            raise RuntimeError(f"crash after {name}")

    with pytest.raises(RuntimeError):
        retention.run(store, [POLICY], LATER, tmp_path / "a", fault=fault)
    assert verify_chain(store).ok  # whatever the crash left verifies
    retention.run(store, [POLICY], LATER, tmp_path / "a")
    report = verify_chain(store)
    assert report.ok, report.reason
    assert report.pruned == planned.events
    assert retention.plan(store, [POLICY], LATER).events == 0


def _pruned_positions(store: EventStore) -> list[int]:
    return [r.position for r in iter_raw(store) if is_pruned(r.data)]


def test_sqlite_tampering_is_told_from_pruning(source: Path, tmp_path: Path) -> None:
    path = _copy(source, tmp_path)
    store = open_store(str(path))
    retention.run(store, [POLICY], LATER, tmp_path / "archive")
    pruned = _pruned_positions(store)
    row = store.read_raw(pruned[0] - 1, 1)[0]
    whole = next(r for r in iter_raw(store) if not is_pruned(r.data) and r.stream == "retention")
    store.close()
    conn = apsw.Connection(str(path))
    # A pruned row's hash changed: the root the prune recorded no longer follows.
    conn.execute("UPDATE events SET hash = ? WHERE position = ?", ("0" * 64, row.position))
    conn.close()
    report = verify_chain(open_store(str(path)))
    assert not report.ok
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE events SET hash = ? WHERE position = ?", (row.hash, row.position))
    # A summary put in a row no prune covers: tampering at that position.
    fake = (
        b'{"$pruned":true,'
        + bytes(whole.data if isinstance(whole.data, bytes) else whole.data.encode())[1:]
    )
    conn.execute("UPDATE events SET data = ? WHERE position = ?", (fake, whole.position))
    conn.close()
    report = verify_chain(open_store(str(path)))
    assert not report.ok and report.first_bad_position == whole.position
    assert "no recorded prune covers" in (report.reason or "")


def test_sqlite_incremental_vacuum_shrinks_the_freelist(source: Path, tmp_path: Path) -> None:
    store = open_store(str(_copy(source, tmp_path)))
    space = store.storage()
    assert space is not None and space.vacuum == "incremental"
    retention.run(store, [POLICY], LATER, tmp_path / "archive", reclaim_steps=0)
    freed = store.storage()
    assert freed is not None and freed.free > 0
    given = retention.reclaim(store, steps=100, pages=4)
    after = store.storage()
    assert after is not None and given > 0 and after.free < freed.free
    assert after.pages < freed.pages
    assert verify_chain(store).ok


def test_sqlite_projections_match_a_fold_of_the_pruned_log(source: Path, tmp_path: Path) -> None:
    from rota.replay.doctor import doctor

    path = _copy(source, tmp_path)
    with rota.open(path, config={}) as scheduler:  # the stored projections, caught up
        scheduler.run_until_idle(timeout=60)
    store = open_store(str(path))
    retention.run(store, [POLICY], LATER, tmp_path / "archive")
    store.close()
    with rota.open(path, config={}) as scheduler:  # applies core.retention.pruned
        scheduler.run_until_idle(timeout=60)
    report = doctor(str(path))
    bad = [(c.name, c.status, c.detail) for c in report.checks if c.status == "fail"]
    assert not bad


def test_export_across_a_prune_with_and_without_the_archive(
    store: EventStore, tmp_path: Path
) -> None:
    from rota.replay.export import export_to_file, verify_export
    from rota.replay.retention_archive import Archive

    whole = tmp_path / "before.jsonl"
    export_to_file(store, whole)
    retention.run(store, [POLICY], LATER, tmp_path / "archive")
    pruned, restored = tmp_path / "pruned.jsonl", tmp_path / "restored.jsonl"
    export_to_file(store, pruned)
    export_to_file(store, restored, archive=Archive(tmp_path / "archive", store.store_id))
    report = verify_export(pruned)
    assert report.ok, report.reason
    assert report.pruned > 0 and report.prunes == 1
    again = verify_export(restored)
    assert again.ok and again.pruned == 0
    before = whole.read_bytes().splitlines()
    after = restored.read_bytes().splitlines()
    assert after[1 : len(before)] == before[1:]  # every original payload is back
    # An archive edited restores nothing: the row stays pruned.
    (name,) = [p.name for p in (tmp_path / "archive").glob("prune-*.jsonl")]
    text = (tmp_path / "archive" / name).read_text().replace("n1", "N1")
    (tmp_path / "archive" / name).write_text(text)
    edited = tmp_path / "edited.jsonl"
    export_to_file(store, edited, archive=Archive(tmp_path / "archive", store.store_id))
    assert verify_export(edited).pruned >= 1


def test_explain_and_time_travel_say_what_is_pruned(source: Path, tmp_path: Path) -> None:
    from rota.replay.explain import explain
    from rota.replay.timetravel import state_at

    store = open_store(str(_copy(source, tmp_path)))
    head = store.head().position
    assert state_at(store, position=head)["pruned"] == []
    done = retention.run(store, [POLICY], LATER, tmp_path / "archive")
    (prune,) = done.prunes
    found = explain(store, "w0")
    (note,) = [s for s in found.statements if s.kind == "pruned"]
    assert note.positions == [prune]
    assert f"pruned by policy terminal-payloads at position {prune}" in note.text
    assert done.archives[0] in note.text
    (travel,) = state_at(store, position=head)["pruned"]
    assert travel["position"] == prune and travel["policy"] == "terminal-payloads"
    assert state_at(store, position=head)["scheduler"]["works"]["w0"]["state"] == "completed"


def test_a_pruned_export_imports_and_verifies(store: EventStore, tmp_path: Path) -> None:
    from rota.replay.export import export_to_file, import_export

    retention.run(store, [POLICY], LATER, tmp_path / "archive")
    exported = tmp_path / "pruned.jsonl"
    export_to_file(store, exported)
    target = open_store(str(tmp_path / "moved.db"))
    report = import_export(exported, target)
    assert report.ok, report.reason
    again = verify_chain(target)
    assert again.ok and again.pruned == verify_chain(store).pruned > 0
    assert target.tree_head().root == store.tree_head().root


def test_a_schedule_policy_covers_only_the_works_it_fired(tmp_path: Path) -> None:
    path = tmp_path / "rota.db"
    with rota.open(path, config={}) as scheduler:
        scheduler.register("greet", lambda ctx: {"pad": "p" * 100})
        scheduler.schedule("tick", binding="greet", every="5m")
        scheduler.schedules.trigger_now("tick", key="k1", actor="me")
        scheduler.submit("plain", binding="greet", input={"name": "n"})
        scheduler.run_until_idle(timeout=60)
        fired = [w.id for w in scheduler.works() if w.id != "plain"]
        store = open_store(str(path))
        policy = RetentionPolicy(name="fires", keep_days=1, schedule="tick")
        # A schedule's Work is standing: it never ends, so nothing is due until it does.
        assert retention.plan(store, [policy], LATER).events == 0
        scheduler.cancel(fired[0], reason="retired")
    planned = retention.plan(store, [policy], LATER)
    assert planned.work_ids["fires"] == fired and planned.policies[0].works == 1
    other = RetentionPolicy(name="none", keep_days=1, schedule="other")
    assert retention.plan(store, [other], LATER).events == 0


def test_a_standing_work_loses_only_its_old_attempts(tmp_path: Path) -> None:
    from rota.replay.doctor import doctor

    path = tmp_path / "rota.db"
    with rota.open(path, config={}) as scheduler:
        scheduler.register("greet", lambda ctx: {"pad": "p" * 3000})
        scheduler.schedule("tick", binding="greet", every="5m")
        for key in ("k1", "k2", "k3"):
            scheduler.schedules.trigger_now("tick", key=key, actor="me")
            scheduler.run_until_idle(timeout=60)
        (work_id,) = [w.id for w in scheduler.works()]
    store = open_store(str(path))
    before = _states(store)
    assert len(before[work_id][1]) == 3
    policy = RetentionPolicy(name="fires", keep_days=1, schedule="tick")
    planned = retention.plan(store, [policy], LATER)
    (part,) = planned.partial["fires"]
    assert part.work_id == work_id and part.attempts == [1, 2]
    assert planned.work_ids["fires"] == []
    done = retention.run(store, [policy], LATER, tmp_path / "archive")
    assert done.events == planned.events > 0
    report = verify_chain(store)
    assert report.ok and report.pruned == planned.events
    head = store.head().position
    assert _states(store, head) == before
    scheduler_now, _ = folded(store)
    attempts = scheduler_now.works[work_id].attempts
    assert [a.data is None for a in attempts] == [True, True, False]  # the last is whole
    assert retention.plan(store, [policy], LATER).events == 0  # nothing left to take
    store.close()
    with rota.open(path, config={}) as scheduler:  # applies the prune to the projections
        scheduler.run_until_idle(timeout=60)
    checks = {c.name: c for c in doctor(str(path)).checks}
    assert checks["projection_drift"].status == "ok", checks["projection_drift"].detail
    assert checks["hash_chain"].status == "ok"


def test_a_large_prune_is_split_into_chunks_of_whole_works(source: Path, tmp_path: Path) -> None:
    store = open_store(str(_copy(source, tmp_path)))
    planned = retention.plan(store, [POLICY], LATER)
    done = retention.run(store, [POLICY], LATER, tmp_path / "archive", max_events=3)
    assert len(done.prunes) > 1 and len(done.archives) == len(done.prunes)
    assert done.events == planned.events
    report = verify_chain(store)
    assert report.ok and report.prunes == len(done.prunes)
    assert report.pruned == planned.events
    named = [w for r in retention.prunes_of(store) for w in r.event.work_ids]
    assert sorted(named) == planned.work_ids["terminal-payloads"]  # each Work once


def test_postgres_tampering_is_told_from_pruning(source: Path, tmp_path: Path) -> None:
    from postgres import admin_execute

    rows = list(iter_raw(open_store(str(source), create=False)))
    with temporary_schema() as schema:
        store = open_store(schema_url(schema))
        store.append_raw(rows)
        retention.run(store, [POLICY], LATER, tmp_path / "archive")
        assert verify_chain(store).ok
        pruned = _pruned_positions(store)
        whole = next(r for r in iter_raw(store) if not is_pruned(r.data) and r.stream == "work/w0")
        assert isinstance(whole.data, str)
        fake = '{"$pruned":true,' + whole.data[1:]
        admin_execute(
            f'UPDATE "{schema}".events SET data = %s WHERE position = %s', (fake, whole.position)
        )
        report = verify_chain(store)
        assert not report.ok and report.first_bad_position == whole.position
        admin_execute(
            f'UPDATE "{schema}".events SET data = %s WHERE position = %s',
            (whole.data, whole.position),
        )
        assert verify_chain(store).ok
        admin_execute(
            f'UPDATE "{schema}".events SET hash = %s WHERE position = %s', ("0" * 64, pruned[0])
        )
        assert not verify_chain(store).ok
        store.close()
