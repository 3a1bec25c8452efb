"""Fair-share weights per scope (`[[scopes]] weight`): Work without keys shares its scope's
flow (docs/guide.md, "Flow control")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import rota
from rota.domain.errors import InvalidCommand
from rota.domain.events.flow import FlowConfigured, ScopeShare
from rota.domain.flow import FlowRules, check_keys, check_rules
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import ConfigError
from rota.replay.rebuild import folded

SCOPES = [
    {"path": "tenants/big", "weight": 3},
    {"path": "tenants/small", "weight": 1},
    {"path": "tenants/small/eu", "weight": 2},
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


def open_with(clock: ManualClock, **config: Any) -> rota.Scheduler:
    return rota.open("memory://", clock=clock, config=config, owner="flow")


def claimed_order(s: rota.Scheduler) -> list[str]:
    return [e.data["work_id"] for e in s.events() if e.type == "core.execution.claimed"]


def test_a_work_without_keys_is_in_the_deepest_weighted_scope_at_or_above_its_own() -> None:
    rules = FlowRules(
        FlowConfigured(scopes=[ScopeShare(path=s["path"], weight=s["weight"]) for s in SCOPES])
    )
    assert rules.flow((), "tenants/big") == "scope:tenants/big"
    assert rules.flow((), "tenants/big/team/x") == "scope:tenants/big"
    assert rules.flow((), "tenants/small/eu/paris") == "scope:tenants/small/eu"
    assert rules.flow((), "tenants/smaller") == ""  # a path, not a prefix of letters
    assert rules.flow((), "root") == ""
    assert rules.flow(("tenant:acme",), "tenants/big") == "tenant:acme"  # a key comes first
    assert [rules.weight(f) for f in ("scope:tenants/big", "scope:tenants/small/eu", "")] == [
        3,
        2,
        1,
    ]
    assert FlowRules().flow((), "tenants/big") == ""  # no weights: one flow, as before


def test_weighted_scopes_share_starts_by_their_weights(clock: ManualClock) -> None:
    with open_with(clock, settings={"concurrency": 1}, scopes=SCOPES[:2]) as s:
        s.register("job", lambda ctx: None, inline=True)
        for n in range(40):
            s.submit(f"big{n}", binding="job", scope="tenants/big/team")
        for n in range(10):
            s.submit(f"small{n}", binding="job", scope="tenants/small")
        s.run_until_idle(timeout=30)
        order = claimed_order(s)
        assert len(order) == 50
        # Both backlogged for the first 40 starts: 3 big for every small one, not FIFO.
        first = order[:40]
        assert sum(w.startswith("small") for w in first) == 10
        assert sum(w.startswith("small") for w in order[:8]) == 2
        view = s.work("small0")
        assert view is not None and view.state == "completed"


def test_scope_weights_are_recorded_and_a_rebuild_gives_the_same_fair_share(
    clock: ManualClock, tmp_path: Any
) -> None:
    path = tmp_path / "s.db"
    config = {"settings": {"concurrency": 1}, "scopes": SCOPES[:2]}
    with rota.open(path, clock=clock, config=config, owner="flow") as s:
        s.register("job", lambda ctx: None, inline=True)
        for n in range(6):
            s.submit(f"big{n}", binding="job", scope="tenants/big")
            s.submit(f"small{n}", binding="job", scope="tenants/small")
        s.run_until_idle(timeout=30)
        (configured,) = [e for e in s.events() if e.type == "core.flow.configured"]
        assert configured.data["scopes"] == SCOPES[:2]
        live = s.service.projection.fair
        assert live.finish.keys() == {"scope:tenants/big", "scope:tenants/small"}
        position, digest = s.queries.state.digest()
        rebuilt, folded_to = folded(s.service.store)
        assert (folded_to, rebuilt.digest()) == (position, digest)
        assert rebuilt.fair == live


def test_a_weight_added_later_regroups_the_ready_backlog_at_once(
    clock: ManualClock, tmp_path: Any
) -> None:
    path, settings = tmp_path / "s.db", {"concurrency": 1}
    with rota.open(path, clock=clock, config={"settings": settings}, owner="flow") as s:
        s.register("job", lambda ctx: None, inline=True)  # (nothing runs: no tick)
        for n in range(12):
            s.submit(f"big{n}", binding="job", scope="tenants/big")
        for n in range(4):
            s.submit(f"small{n}", binding="job", scope="tenants/small")
    config = {"settings": settings, "scopes": SCOPES[:2]}
    with rota.open(path, clock=clock, config=config, owner="flow") as s:
        s.register("job", lambda ctx: None, inline=True)
        s.run_until_idle(timeout=30)
        order = claimed_order(s)
        # The queued Works took their scopes' flows when the weights came: small ones start
        # within the first few, not after all twelve big ones.
        assert order.index("small0") < 4 and order[-1].startswith("big")


def test_scope_weights_and_scope_keys_are_checked() -> None:
    with pytest.raises(InvalidCommand, match="weight must be an integer from 1 to 1000"):
        check_rules([], [], 10, [ScopeShare(path="a", weight=0)])
    with pytest.raises(InvalidCommand, match="a weight needs one scope path"):
        check_rules([], [], 10, [ScopeShare(path="a", weight=1), ScopeShare(path="a", weight=2)])
    with pytest.raises(InvalidCommand, match="names a scope's fair-share flow"):
        check_keys(["scope:tenants/big"])
    with pytest.raises((ConfigError, ValueError), match="weight"):
        rota.open("memory://", config={"scopes": [{"path": "a", "weight": 0}]})
