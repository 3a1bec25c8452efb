"""Flow control's pure parts: rules, rates, GCRA buckets, fair share and the starvation
bound (rota.domain.flow, rota.domain.choosing, rota.domain.flow_checks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.domain import admission
from rota.domain.choosing import Chooser
from rota.domain.errors import InvalidCommand
from rota.domain.events.flow import FlowConfigured, KeyRule, RateRule
from rota.domain.flow import (
    Fairness,
    FlowRules,
    check_keys,
    check_priority,
    check_rules,
    due,
    interval_us,
    micros,
    parse_rate,
    rate_text,
    serve,
    take,
    tokens,
)
from rota.domain.state import PendingInput, WorkState, with_flow

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def work(n: int, *, keys: tuple[str, ...] = (), priority: int = 0) -> WorkState:
    return WorkState(
        work_id=f"w{n}",
        scope="root",
        binding="b",
        kind="run-once",
        trigger="all",
        safety="undeclared",
        version=2,
        submitted_at=T0,
        pending=(PendingInput(n, "submit"),),
        flow=with_flow(None, keys=keys, priority=priority),
    )


# -- values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [("100/min", 100, 60.0), ("5/s", 5, 1.0), ("1000/hour", 1000, 3600.0), ("10/30s", 10, 30.0),
     ("1/day", 1, 86400.0), (" 7 / 2 minutes ", 7, 120.0)],
)  # fmt: skip
def test_rates_parse_and_print(text: str, count: int, period: float) -> None:
    assert parse_rate(text) == (count, period)
    assert parse_rate(rate_text(count, period)) == (count, period)


@pytest.mark.parametrize("text", ["", "100", "100/fortnight", "0/min", "-1/s", "a/min", "5/0s"])
def test_a_bad_rate_says_what_form_it_takes(text: str) -> None:
    with pytest.raises(InvalidCommand) as refused:
        parse_rate(text)
    assert refused.value.code == "invalid_flow"


def test_keys_and_priorities_are_checked() -> None:
    assert check_keys(["tenant:acme", "resource:stripe"]) == ("tenant:acme", "resource:stripe")
    for bad in (["tenant acme"], ["a"] * 2, [f"k{n}" for n in range(9)], [""]):
        with pytest.raises(InvalidCommand, match="key"):
            check_keys(bad)
    assert check_priority(-1000) == -1000
    for bad_priority in (1001, 1.5, True, "1"):
        with pytest.raises(InvalidCommand, match="priority"):
            check_priority(bad_priority)


def test_rules_match_exact_then_longest_prefix() -> None:
    rules = FlowRules(
        FlowConfigured(
            keys=[
                KeyRule(key="tenant:*", concurrency=2, weight=1),
                KeyRule(key="tenant:big*", concurrency=5),
                KeyRule(key="tenant:big", weight=3),
            ]
        )
    )
    assert rules.limit("tenant:acme") == 2
    assert rules.limit("tenant:bigger") == 5
    assert rules.limit("tenant:big") == 0  # its exact rule sets no limit: unbounded
    assert rules.weight("tenant:big") == 3
    assert rules.weight("tenant:acme") == 1
    assert rules.weight("other") == 1


def test_rules_refuse_what_a_configuration_cannot_mean() -> None:
    with pytest.raises(InvalidCommand, match="twice"):
        check_rules([KeyRule(key="a"), KeyRule(key="a")], [], 10)
    with pytest.raises(InvalidCommand, match="weight"):
        check_rules([KeyRule(key="a", weight=0)], [], 10)
    with pytest.raises(InvalidCommand, match="burst"):
        check_rules([], [RateRule(key="a", count=1, period=1.0, burst=0)], 10)
    with pytest.raises(InvalidCommand, match="prefix"):
        check_rules([KeyRule(key="te*nant")], [], 10)


# -- rate buckets --------------------------------------------------------------------------


def test_a_bucket_starts_full_and_refills_at_its_rate() -> None:
    interval = interval_us(RateRule(key="k", count=60, period=60.0, burst=3))
    assert interval == 1_000_000
    now, tat = micros(T0), 0
    for _ in range(3):
        after = take(tat, now, 1, interval, 3)
        assert after is not None
        tat = after
    assert take(tat, now, 1, interval, 3) is None
    assert due(tat, 1, interval, 3) == now + interval
    assert tokens(tat, now, interval, 3) == 0.0
    assert take(tat, now + interval, 1, interval, 3) is not None
    assert take(tat, now + interval, 2, interval, 3) is None  # a cost of 2 waits for 2


@given(
    st.integers(1, 50),
    st.integers(1, 20),
    st.lists(st.tuples(st.integers(0, 3_000_000), st.integers(1, 3)), max_size=200),
)
def test_no_window_starts_more_than_its_rate_plus_burst(
    per_second: int, burst: int, steps: list[tuple[int, int]]
) -> None:
    """Property: takes allowed by the bucket, in any window of W µs, cost at most
    burst + W / interval tokens, and the bucket never holds less than zero tokens."""
    interval = interval_us(RateRule(key="k", count=per_second, period=1.0, burst=burst))
    now, tat = micros(T0), 0
    taken: list[tuple[int, int]] = []
    for gap, cost in steps:
        now += gap
        after = take(tat, now, cost, interval, burst)
        if after is not None:
            tat = after
            taken.append((now, cost))
            assert tokens(tat, now, interval, burst) >= 0.0
    for i, (start, _) in enumerate(taken):
        for end in (start + 1, start + 1_000_000, start + 7_777_777):
            spent = sum(c for t, c in taken[i:] if t < end)
            assert spent <= burst + (end - start) / interval + 1e-9


# -- fair share and the starvation bound ------------------------------------------------------


def _served(chooser: Chooser, count: int) -> list[str]:
    order = []
    for _ in range(count):
        chosen = chooser.next()
        if chosen is None:
            break
        work, oldest = chosen
        flow = work.keys[0] if work.keys else ""
        chooser.started(work, oldest, flow)
        order.append(flow)
    return order


def test_fair_share_serves_flows_by_weight_whatever_their_backlog() -> None:
    big = [work(n, keys=("tenant:big",)) for n in range(1, 301)]
    small = [work(n, keys=("tenant:small",)) for n in range(301, 401)]
    rules = FlowRules(FlowConfigured(keys=[KeyRule(key="tenant:big", weight=3)], share=0))
    chooser = Chooser(admission.group_ready(big + small), fair=Fairness(), rules=rules, limit=400)
    order = _served(chooser, 40)
    assert order.count("tenant:big") == 30 and order.count("tenant:small") == 10
    for end in range(4, 41, 4):  # the weighted ratio holds in every prefix, within one start
        assert abs(order[:end].count("tenant:big") - 3 * end / 4) <= 1


def test_a_flow_back_from_idle_starts_at_the_virtual_time_not_behind_it() -> None:
    fair = Fairness()
    for _ in range(100):
        serve(fair, "tenant:busy", 1, False)
    quiet = [work(1000 + n, keys=("tenant:quiet",)) for n in range(10)]
    busy = [work(n, keys=("tenant:busy",)) for n in range(1, 11)]
    chooser = Chooser(admission.group_ready(busy + quiet), fair=fair, rules=FlowRules(), limit=20)
    order = _served(chooser, 10)
    # it gets its share from now on, not 100 starts of catching up
    assert order.count("tenant:quiet") == 5


def test_priority_is_strict_but_the_oldest_ready_work_gets_one_start_in_every_share() -> None:
    old_low = [work(n, priority=0) for n in range(1, 4)]
    high = [work(n, keys=("hot",), priority=9) for n in range(10, 100)]
    rules = FlowRules(FlowConfigured(share=5))
    chooser = Chooser(admission.group_ready(old_low + high), fair=Fairness(), rules=rules, limit=64)
    picked = []
    for _ in range(15):
        chosen = chooser.next()
        assert chosen is not None
        w, oldest = chosen
        chooser.started(w, oldest, w.keys[0] if w.keys else "")
        picked.append((w.work_id, oldest))
    lows = [i for i, (w, _) in enumerate(picked) if w in {"w1", "w2", "w3"}]
    assert lows == [4, 9, 14]  # one in every 5 starts, oldest first
    assert all(oldest for i, (_, oldest) in enumerate(picked) if i in lows)


def test_one_group_is_handed_out_in_order_with_no_fair_share_bookkeeping() -> None:
    works = [work(n) for n in range(1, 6)]
    chooser = Chooser(admission.group_ready(works), fair=Fairness(), rules=FlowRules(), limit=3)
    assert [chooser.next()[0].work_id for _ in range(3)] == ["w1", "w2", "w3"]  # type: ignore[index]
    assert chooser.next() is None  # the pass's limit


def test_fair_share_state_forgets_flows_behind_the_virtual_time() -> None:
    fair = Fairness()
    for n in range(2000):  # one start each: every tag is still ahead of V (0)
        serve(fair, f"tenant:{n}", 1, False)
    assert len(fair.finish) == 2000
    for _ in range(3):  # V moves past them: a flow at or behind V needs no entry
        serve(fair, "tenant:steady", 1, False)
    assert fair.vtime == 2.0
    assert fair.finish == {"tenant:steady": 3.0}


def test_time_of_tokens_is_exact_microseconds() -> None:
    later = T0 + timedelta(microseconds=1)
    assert micros(later) - micros(T0) == 1


def test_work_skipped_for_a_full_key_is_counted_apart_in_a_lone_group_too() -> None:
    """One flow (every Work's first key `a`), 300 Works also on the full key `k`, then one
    Work on `a` alone: the skips do not use up the pass's `limit` of Work looked at."""
    from rota.domain.flow_checks import FlowView
    from rota.domain.policy import Binding, Pinned, Registration, Settings

    pinned = Pinned(
        generation="g",
        binding=Binding(name="b", executor="x"),
        registration=Registration(name="x"),
        timeout_seconds=60.0,
        lease_seconds=60.0,
    )
    rules = FlowRules(FlowConfigured(keys=[KeyRule(key="k", concurrency=1)]))
    blocked = [work(n, keys=("a", "k")) for n in range(1, 301)]
    works = [*blocked, work(400, keys=("a",))]
    plan = admission.plan_starts(
        works,
        now=T0,
        owner="o",
        settings=Settings(concurrency=0),
        pin=lambda w: pinned,
        pool_in_use={},
        scope_in_use={},
        flow=FlowView(rules=rules, key_in_use=lambda key: 1 if key == "k" else 0),
        limit=256,
    )
    assert plan.started == ["w400"]
    assert sum(w.code == "capacity_key" for w in plan.waiting) == 300
