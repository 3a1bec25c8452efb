"""The flow-control fields of a submit (priority, keys, cost, throttle) through every entry
point besides `Scheduler.submit`: `submit_many` (both item forms), `rota.aio`, the test kit,
schedules (Python and `[[schedules]]`), and how a Work's view shows them. The CLI's are in
test_flow_cli.py, the HTTP API's in tests/http_api/test_flow_api.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rota
import rota.aio
from rota.domain.events.schedule import ScheduleDefined
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.config import Config, ConfigError
from rota.testing import TestScheduler, open_test

FLOW = {"priority": 5, "keys": ["tenant:acme", "resource:db"], "cost": 3}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


def nothing(ctx: rota.LaunchContext) -> None:
    return None


def flow_of(view: Any) -> tuple[int, tuple[str, ...], int, rota.Throttle | None]:
    return view.priority, tuple(view.keys), view.cost, view.throttle


def submitted(s: rota.Scheduler, work: str) -> dict[str, Any]:
    (event,) = [
        e for e in s.events() if e.stream == f"work/{work}" and e.type.endswith("submitted")
    ]
    data: dict[str, Any] = event.data
    return {**data, **(data["flow"] or {})}  # (`flow`: null, or every flow field)


# -- submit_many ---------------------------------------------------------------------------


def test_submit_many_carries_the_flow_fields_of_both_item_forms(clock: ManualClock) -> None:
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        s.submit_many(
            [
                rota.Submission("typed", binding="job", throttle=rota.Throttle("t", 60), **FLOW),
                {
                    "work_id": "mapped",
                    "binding": "job",
                    "throttle": {"key": "t", "period": 30},
                    **FLOW,
                },
                {"work_id": "plain", "binding": "job"},
            ]
        )
        assert flow_of(s.work("typed")) == (
            5,
            ("tenant:acme", "resource:db"),
            3,
            rota.Throttle("t", 60.0),
        )
        assert flow_of(s.work("mapped")) == (
            5,
            ("tenant:acme", "resource:db"),
            3,
            rota.Throttle("t", 30.0),
        )
        assert flow_of(s.work("plain")) == (0, (), 1, None)
        # The period is recorded as seconds in one spelling, whatever number it was given as.
        assert submitted(s, "mapped")["throttle"] == {"key": "t", "period": 30.0}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"priority": 1001}, "priority 1001"),
        ({"priority": "5"}, "priority '5'"),
        ({"keys": "tenant:acme"}, "keys must be a list"),
        ({"keys": ["bad key"]}, "key 'bad key'"),
        ({"cost": 0}, "cost 0"),
        ({"throttle": {"key": "t"}}, "fields key and period"),
        ({"throttle": {"key": "t", "period": True}}, "must be a number of seconds"),
        ({"throttle": {"key": "t", "period": 0}}, "throttle period 0.0"),
        ({"throttle": ("t", 5)}, "rota.Throttle(key, period)"),
    ],
)
def test_a_bad_flow_field_in_submit_many_refuses_the_whole_batch(
    clock: ManualClock, fields: dict[str, Any], says: str
) -> None:
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        head = s.store.head()
        with pytest.raises(rota.RotaError) as refused:
            s.submit_many(
                [
                    {"work_id": "ok", "binding": "job"},
                    {"work_id": "bad", "binding": "job", **fields},
                ]
            )
        assert refused.value.code == "invalid_flow"
        assert says in str(refused.value)
        assert s.store.head() == head


# -- rota.aio --------------------------------------------------------------------------------


def test_aio_submit_and_submit_many_carry_the_flow_fields() -> None:
    async def main() -> tuple[Any, Any, Any]:
        async with await rota.aio.open("memory://") as scheduler:
            scheduler.register("job", nothing)
            await scheduler.submit(
                "one", binding="job", throttle=rota.Throttle("tenant:acme", 10), **FLOW
            )
            await scheduler.submit_many([{"work_id": "two", "binding": "job", "priority": -3}])
            listed = {w.id: w for w in await scheduler.works()}
            return await scheduler.work("one"), await scheduler.work("two"), listed

    one, two, listed = asyncio.run(main())
    assert flow_of(one) == (
        5,
        ("tenant:acme", "resource:db"),
        3,
        rota.Throttle("tenant:acme", 10.0),
    )
    assert flow_of(two) == (-3, (), 1, None)
    assert flow_of(listed["one"]) == flow_of(one)  # the list shows them too


# -- the test kit ----------------------------------------------------------------------------


def test_the_kit_submits_with_the_flow_fields_and_priority_orders_the_starts() -> None:
    kit: TestScheduler
    with open_test(config={"settings": {"concurrency": 1}}) as kit:
        order: list[str] = []
        kit.register("job", lambda ctx: order.append(ctx.work_id))
        kit.submit("low", binding="job")
        kit.submit("high", binding="job", priority=9, keys=["tenant:a"], cost=2)
        kit.run_until_idle()
        assert order == ["high", "low"]
        assert flow_of(kit.work("high")) == (9, ("tenant:a",), 2, None)


# -- schedules -------------------------------------------------------------------------------


def test_a_schedules_fires_create_its_work_with_its_priority_and_keys(clock: ManualClock) -> None:
    with rota.open("memory://", clock=clock, config={"settings": {"concurrency": 1}}) as s:
        s.register("job", nothing)
        view = s.schedule("sync", binding="job", every="1h", priority=7, keys=["tenant:acme"])
        assert (view.priority, view.keys) == (7, ["tenant:acme"])
        s.schedule("each", binding="job", every="1h", overlap="allow_all", priority=-2, keys=["k"])
        clock.advance(3600)
        s.tick()
        works = {w.id: w for w in s.works()}
        assert flow_of(works["schedule.sync@job"]) == (7, ("tenant:acme",), 1, None)
        (each,) = [w for w in works.values() if w.id.startswith("schedule.each@job:")]
        assert flow_of(each) == (-2, ("k",), 1, None)
        defined = [e.data for e in s.events() if e.type == "core.schedule.defined"]
        assert [(d["name"], d["priority"], d["keys"]) for d in defined] == [
            ("sync", 7, ["tenant:acme"]),
            ("each", -2, ["k"]),
        ]


def test_a_redefinition_applies_to_the_works_fires_create_after_it(clock: ManualClock) -> None:
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        s.schedule("sync", binding="job", every="1h", priority=7, keys=["tenant:acme"])
        clock.advance(3600)
        s.tick()
        s.schedule("sync", binding="job", every="1h", priority=9, keys=["tenant:beta"])
        s.cancel("schedule.sync@job")  # ends this run: the next fire starts the next one
        clock.advance(3600)
        s.tick()
        # The standing Work keeps what it was created with; the next run has the new ones.
        assert flow_of(s.work("schedule.sync@job")) == (7, ("tenant:acme",), 1, None)
        assert flow_of(s.work("schedule.sync@job:run2")) == (9, ("tenant:beta",), 1, None)


def test_a_schedule_without_flow_fields_shows_the_defaults_and_stays_unchanged(
    clock: ManualClock,
) -> None:
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        s.schedule("plain", binding="job", every="1h")
        head = s.store.head()
        s.schedule("plain", binding="job", every="1h", priority=0, keys=[])  # the defaults
        assert s.store.head() == head
        shown = msgspec.json.decode(msgspec.json.encode(s.schedules.show("plain")))
        assert (shown["priority"], shown["keys"]) == (0, [])
        assert s.schedule("plain", binding="job", every="1h", priority=1).version == 2


def test_a_schedule_written_before_the_flow_fields_reads_with_the_defaults() -> None:
    # A `core.schedule.defined` as an earlier rota encoded it: no priority, no keys.
    old = (
        b'{"type":"core.schedule.defined","name":"n","schedule_version":1,"spec":"every 1h",'
        b'"binding":"job","anchor":"1970-01-01T00:00:00Z","since":"2026-01-01T00:00:00Z"}'
    )
    event = msgspec.json.decode(old, type=ScheduleDefined)
    assert (event.priority, event.keys) == (0, [])


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"priority": 2000}, "invalid_flow"),
        ({"keys": "tenant:acme"}, "invalid_flow"),
        ({"keys": ["a", "a"]}, "invalid_flow"),
    ],
)
def test_a_schedule_with_bad_flow_fields_is_refused(
    clock: ManualClock, fields: dict[str, Any], code: str
) -> None:
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        with pytest.raises(rota.RotaError) as refused:
            s.schedule("bad", binding="job", every="1h", **fields)
        assert refused.value.code == code


def test_config_schedules_carry_priority_and_keys(tmp_path: Path, clock: ManualClock) -> None:
    toml = """\
[[schedules]]
name = "nightly"
binding = "job"
every = "1h"
priority = 5
keys = ["tenant:acme"]
"""
    (tmp_path / "rota.toml").write_text(toml)
    config = Config.load(tmp_path / "rota.toml")
    assert config.schedules["nightly"]["priority"] == 5
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        s.schedules.apply(config.schedules)
        clock.advance(3600)
        s.tick()
        assert flow_of(s.work("schedule.nightly@job")) == (5, ("tenant:acme",), 1, None)
        assert s.schedules.apply_plan(config.schedules).unchanged == ["nightly"]


@pytest.mark.parametrize(
    ("line", "field"),
    [("priority = 5000", "priority"), ('keys = ["bad key"]', "keys"), ('keys = "k"', "keys")],
)
def test_a_config_schedule_with_bad_flow_fields_names_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    toml = f'[[schedules]]\nname = "n"\nbinding = "job"\nevery = "1h"\n{line}\n'
    (tmp_path / "rota.toml").write_text(toml)
    with pytest.raises(ConfigError) as refused:
        Config.load(tmp_path / "rota.toml")
    assert f"schedules[0].{field}" in str(refused.value)


# -- reading -------------------------------------------------------------------------------


def test_the_views_show_the_flow_fields(clock: ManualClock) -> None:
    with rota.open("memory://", clock=clock) as s:
        s.register("job", nothing)
        s.submit("w", binding="job", throttle={"key": "tenant:acme", "period": 90}, **FLOW)
        view = s.work("w")
        assert view is not None
        encoded = msgspec.json.decode(view.to_json())
        assert {k: encoded[k] for k in ("priority", "keys", "cost", "throttle")} == {
            "priority": 5,
            "keys": ["tenant:acme", "resource:db"],
            "cost": 3,
            "throttle": {"key": "tenant:acme", "period": 90.0},
        }
        (summary,) = s.works()
        assert msgspec.json.decode(summary.to_json())["throttle"] == encoded["throttle"]
