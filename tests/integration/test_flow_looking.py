"""Looking at flow control: what `rota explain`, `s.work(id).waiting`, `s.capacity()` and
the CLI say holds a Work back (keys, rates, pauses, priority, fair share)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from integration.test_flow_control import Blocking
from rota.application.ports.records import NewEvent
from rota.application.queries.flow import fair_share
from rota.domain.events.flow import FlowPaused
from rota.infrastructure.clock import ManualClock
from rota.replay.explain import explain


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


def open_with(clock: ManualClock, **config: Any) -> rota.Scheduler:
    return rota.open("memory://", clock=clock, config=config, owner="flow")


def said(s: rota.Scheduler, work_id: str) -> list[str]:
    return [st.text for st in explain(s.store, work_id, service=s.service).statements]


def test_a_full_key_is_named_with_its_count_in_explain_capacity_and_the_work(
    clock: ManualClock,
) -> None:
    keys = [{"key": "tenant:*", "concurrency": 2}]
    with open_with(clock, settings={"concurrency": 10}, keys=keys) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        s.submit("plain", binding="agent")  # holds a slot of the pool, none of the key
        for n in range(4):
            s.submit(f"acme{n}", binding="agent", keys=["tenant:acme"], priority=3)
        s.tick()
        waiting = s.work("acme3").waiting
        assert waiting is not None and waiting.code == "capacity_key"
        assert waiting.detail == "key tenant:acme at 2/2"
        view = s.work("acme3")
        assert view is not None and view.priority == 3 and view.keys == ("tenant:acme",)
        lines = said(s, "acme3")
        assert "priority 3, flow tenant:acme, keys tenant:acme" in lines[0]
        held = next(line for line in lines if line.startswith("waiting (capacity_key)"))
        assert held.startswith("waiting (capacity_key): key tenant:acme at 2/2")
        # the slots named are the key's, not the pool's
        assert "slots held by acme0/1 (claimed at " in held and "acme1/1 (claimed at " in held
        assert "plain/1" not in held
        keys_now = s.capacity()["keys"]
        assert keys_now == {"tenant:acme": {"limit": 2, "in_use": 2, "waiting": 2, "preview": 2}}
        agent.release.set()


def test_a_rate_says_its_words_tokens_and_when_the_next_token_is_due(clock: ManualClock) -> None:
    rates = [{"key": "resource:stripe", "rate": "100/min", "burst": 2}]
    with open_with(clock, settings={"concurrency": 10}, rates=rates) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(3):
            s.submit(f"pay{n}", binding="agent", keys=["resource:stripe"])
        s.tick()
        text = next(line for line in said(s, "pay2") if line.startswith("waiting"))
        assert "waiting on rate:resource:stripe 100/min" in text
        assert "next token in 0.6 s" in text
        bucket = s.capacity()["buckets"]["resource:stripe"]
        assert bucket == {
            "rule": "resource:stripe",
            "rate": "100/min",
            "burst": 2,
            "tokens": 0.0,
            "next_token": "2026-11-02T10:00:00.600000Z",
        }
        clock.advance(0.3)
        half = s.capacity()["buckets"]["resource:stripe"]
        assert half["tokens"] == 0.5 and half["next_token"] == bucket["next_token"]
        clock.advance(0.6)
        more = s.capacity()["buckets"]["resource:stripe"]
        assert more["tokens"] == 1.5 and more["next_token"] == "2026-11-02T10:00:01.200000Z"
        clock.advance(0.6)  # two tokens back: full, none due
        full = s.capacity()["buckets"]["resource:stripe"]
        assert full["tokens"] == 2.0 and full["next_token"] is None
        agent.release.set()


def test_fair_share_says_which_flow_was_served_and_by_what_weights(clock: ManualClock) -> None:
    keys = [{"key": "tenant:big", "weight": 3}]
    with open_with(clock, settings={"concurrency": 4}, keys=keys) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        for n in range(10):
            s.submit(f"big{n}", binding="agent", keys=["tenant:big"])
        for n in range(3):
            s.submit(f"small{n}", binding="agent", keys=["tenant:small"])
        s.tick()
        started = {w.id for w in s.works() if w.state == "running"}
        assert sum(1 for w in started if w.startswith("big")) == 3
        lines = said(s, "small1")
        fair = [line for line in lines if line.startswith("fair share")]
        assert fair == [
            "fair share: tenant:big served 3 of the last 4 starts at priority 0 since this Work "
            "was ready (weights tenant:big 3, tenant:small 1); 1 start in every 10 goes to the "
            "oldest ready Work (4 since the last)"
        ]
        # A Work of the flow that was served most says who else was served.
        other = [line for line in said(s, "big5") if line.startswith("fair share")]
        assert other and other[0].startswith("fair share: tenant:small served 1 of the last 4")
        agent.release.set()


def test_higher_priority_starts_and_a_pass_limit_are_said(clock: ManualClock) -> None:
    with open_with(clock, settings={"concurrency": 2}) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        s.submit("low", binding="agent")
        s.submit("urgent0", binding="agent", priority=5)
        s.submit("urgent1", binding="agent", priority=5)
        s.tick()
        lines = said(s, "low")
        assert "priority: 2 of the last 2 starts were at a higher priority (this Work's is 0)" in (
            lines
        )
        assert not any(line.startswith("fair share") for line in lines)  # one flow: no share
        work = s.service.projection.works["low"]
        words = fair_share(s.service.projection, work, [], since=0, order=300)
        assert words == [
            (
                "a start pass starts at most 256 Work: this one is number 300 in admission "
                "order, so a later pass reaches it",
                [],
            )
        ]
        assert fair_share(s.service.projection, work, [], since=0, order=256) == []
        agent.release.set()


def test_a_pause_is_listed_and_explained(clock: ManualClock) -> None:
    with open_with(clock, settings={"concurrency": 4}) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        paused = FlowPaused(target="key", name="tenant:acme", reason="invoice run")
        s.store.append([NewEvent("flow/pauses", paused)])
        s.submit("a", binding="agent", keys=["tenant:acme"])
        s.tick()
        assert s.capacity()["paused"] == [
            {"target": "key", "name": "tenant:acme", "reason": "invoice run"}
        ]
        waiting = s.work("a").waiting
        assert waiting is not None and waiting.code == "flow_paused"
        assert any("key tenant:acme is paused (invoice run)" in line for line in said(s, "a"))


def test_the_capacity_cli_prints_keys_buckets_and_pauses(tmp_path: Path, capsys: Any) -> None:
    from rota.cli import run

    path = tmp_path / "flow.db"
    keys = [{"key": "tenant:*", "concurrency": 1}]
    rates = [{"key": "resource:stripe", "rate": "10/s", "burst": 1}]
    config = tmp_path / "rota.toml"
    config.write_text(
        '[[keys]]\nkey = "tenant:*"\nconcurrency = 1\n'
        '[[rates]]\nkey = "resource:stripe"\nrate = "10/s"\nburst = 1\n'
    )
    with rota.open(path, config={"keys": keys, "rates": rates}) as s:
        agent = Blocking()
        s.register("agent", executor=agent)
        s.submit("a0", binding="agent", keys=["tenant:acme", "resource:stripe"])
        s.submit("a1", binding="agent", keys=["tenant:acme", "resource:stripe"])
        s.tick()
        agent.release.set()
    where = ["--config", str(config), "--store", str(path), "capacity"]
    assert run([*where, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    # (this process registers no executor `agent`: the dry run holds a1 back for that)
    assert shown["keys"]["tenant:acme"] == {"limit": 1, "in_use": 1, "waiting": 0, "preview": 0}
    assert shown["buckets"]["resource:stripe"]["rate"] == "10/s"
    assert run(where) == 0
    out = capsys.readouterr().out
    assert "key tenant:acme: 1/1 in use, 0 waiting (last pass), 0 would wait now" in out
    assert "rate resource:stripe: 10/s, " in out
