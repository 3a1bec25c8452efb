"""`/metrics`: values from the projections (right after a restart), labels only from
bounded configuration (never a Work id), and the series budget (kept, and dropped counted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import rota
from http_api.conftest import Api, echo, start_api
from rota.infrastructure.config import HttpModel


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(api: Api) -> str:
    answer = api.client("read").get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return answer.text


def test_metrics_count_works_attempts_holds_and_pools(idle_api: Api) -> None:
    s = idle_api.scheduler
    s.register_gate(
        "approval", lambda work, binding, first: "hold" if work.work_id == "g" else None
    )
    s.submit("a", binding="echo", scope="root/team/deep/er")
    s.submit("g", binding="echo")
    s.service.lifecycle.record_served(["unconfigured"])  # a daemon elsewhere serves it
    s.submit("x", binding="unconfigured")
    s.run_until_idle(timeout=30)
    got = samples(scrape(idle_api))
    assert got[("rota_works", (("scope", "root/team"), ("state", "completed")))] == 1
    assert got[("rota_works", (("scope", "root"), ("state", "held")))] == 1
    assert got[("rota_attempts_total", (("binding", "echo"), ("outcome", "completed")))] == 1
    assert got[("rota_holds", (("kind", "gate"),))] == 1
    assert got[("rota_holds", (("kind", "budget"),))] == 0
    assert got[("rota_pool_limit", (("pool", "agents"),))] == 4
    assert got[("rota_pool_in_use", (("pool", "agents"),))] == 0
    assert got[("rota_projection_lag_events", ())] == 0
    assert got[("rota_log_position", ())] == idle_api.head().position
    assert got[("rota_appends_total", ())] > 0
    assert (
        "rota_build_info",
        (("python", __import__("platform").python_version()), ("version", rota.__version__)),
    ) in got
    assert got[("rota_metrics_series_dropped_total", ())] == 0


def test_no_label_is_a_work_id(idle_api: Api) -> None:
    s = idle_api.scheduler
    for i in range(5):
        s.submit(f"secret-work-{i}", binding="echo", input={"token": "hunter2"})
    s.run_until_idle(timeout=30)
    text = scrape(idle_api)
    assert "secret-work" not in text and "hunter2" not in text


def test_values_are_right_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    with rota.open(path) as s:
        s.register("echo", echo)
        for i in range(3):
            s.submit(f"w{i}", binding="echo")
        s.run_until_idle(timeout=30)
    with rota.open(path) as again:  # a new process: nothing but the log and projections
        again.register("echo", echo)
        served = start_api(again, tmp_path)
        try:
            got = samples(scrape(served))
        finally:
            served.server.stop()
    assert got[("rota_works", (("scope", "root"), ("state", "completed")))] == 3
    assert got[("rota_attempts_total", (("binding", "echo"), ("outcome", "completed")))] == 3


def test_a_config_with_more_series_than_the_budget_keeps_to_it(tmp_path: Path) -> None:
    """80 bindings x 2 outcomes and 60 scopes x 9 states is far more than a budget of 120:
    the scrape exports exactly 120 series and counts the rest as dropped."""
    bindings = [{"name": f"b{i:02d}", "executor": "echo"} for i in range(80)]
    with rota.open(tmp_path / "budget.db") as s:
        s.register("echo", echo)
        for binding in bindings:
            s.bind(binding["name"], executor="echo")
        for i in range(80):
            s.submit(f"w{i}", binding=f"b{i:02d}", scope=f"root/s{i % 60}")
        s.submit("c", binding="b00", scope="root/s0")
        s.cancel("c")
        s.run_until_idle(timeout=60)
        budget = 120
        served = start_api(
            s, tmp_path, settings=HttpModel(listen="127.0.0.1:0", metrics_series_budget=budget)
        )
        try:
            first = samples(scrape(served))
            second = samples(scrape(served))
        finally:
            served.server.stop()
        unbounded = start_api(s, tmp_path / "u", settings=HttpModel(listen="127.0.0.1:0"))
        try:
            everything = samples(scrape(unbounded))
        finally:
            unbounded.server.stop()
    exported = [k for k in first if not k[0].endswith("_created")]
    assert len(exported) == budget
    assert first[("rota_metrics_series", ())] == budget
    total = len([k for k in everything if not k[0].endswith("_created")])
    assert total > budget  # the same store without a tight budget exports more
    assert everything[("rota_metrics_series_dropped_total", ())] == 0
    dropped = first[("rota_metrics_series_dropped_total", ())]
    assert dropped == total - budget
    assert second[("rota_metrics_series_dropped_total", ())] == 2 * dropped  # a counter
    # The totals come first: what is dropped is per-binding and per-scope detail.
    for name in ("rota_projection_lag_events", "rota_log_position", "rota_build_info"):
        assert any(k[0] == name for k in first), name


def test_schedule_fires_skips_by_reason_quarantine_and_the_leader_lease(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from rota.infrastructure.clock import ManualClock

    clock = ManualClock(datetime(2026, 11, 2, 9, 0, 30, tzinfo=UTC))
    path = tmp_path / "schedules.db"
    with rota.open(path, clock=clock, owner="metrics-a") as s:
        s.register("echo", echo)
        s.schedule("tick", binding="echo", every="1m")  # overlap: skip
        s.schedule("held", binding="echo", every="1m")
        s.schedules.pause("held", reason="maintenance")
        for _ in range(3):  # 09:01 fires; its Work never runs, so 09:02 and 09:03 overlap
            clock.advance(60)
            s.tick()
        s.schedules.trigger_now("tick", key="manual-1")
        served = start_api(s, tmp_path)
        try:
            got = samples(scrape(served))
        finally:
            served.server.stop()
    assert got[("rota_schedule_fires_total", (("schedule", "tick"),))] == 2  # 09:01 + manual
    assert got[("rota_schedule_fires_total", (("schedule", "held"),))] == 0
    assert got[("rota_schedule_skips_total", (("reason", "paused"), ("schedule", "held")))] == 3
    assert got[("rota_schedule_skips_total", (("reason", "overlap"), ("schedule", "tick")))] == 2
    skip_series = [k for k in got if k[0] == "rota_schedule_skips_total"]
    assert len(skip_series) == 2
    assert got[("rota_schedules", (("state", "active"),))] == 1
    assert got[("rota_schedules", (("state", "paused"),))] == 1
    assert got[("rota_schedules_quarantined", ())] == 0
    assert got[("rota_schedule_leader_held", ())] == 1
    # Another process, after a restart: the same counts from the log; it holds no lease.
    with rota.open(path, clock=clock, owner="metrics-b") as again:
        again.register("echo", echo)
        served = start_api(again, tmp_path / "b")
        try:
            after = samples(scrape(served))
        finally:
            served.server.stop()
    assert after[("rota_schedule_skips_total", (("reason", "paused"), ("schedule", "held")))] == 3
    assert after[("rota_schedule_skips_total", (("reason", "overlap"), ("schedule", "tick")))] == 2
    assert after[("rota_schedule_fires_total", (("schedule", "tick"),))] == 2
    assert after[("rota_schedule_leader_held", ())] == 0


def test_keys_and_buckets_get_bounded_labels_the_rest_summed_under_other(
    tmp_path: Path,
) -> None:
    """Five tenants with a limited key each (and a rate each), two key labels: the two
    busiest keys and emptiest buckets keep their names, the rest are one `other` series,
    and the sums are the whole."""
    import threading

    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from rota.http.metrics import RotaCollector

    release = threading.Event()

    class Blocking(rota.Executor):
        name, pool = "blocking", "agents"

        def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
            threading.Thread(target=lambda: (release.wait(30), done(rota.Result()))).start()

    config = {
        "settings": {"concurrency": 50},
        "keys": [{"key": "tenant:*", "concurrency": 3}],
        "rates": [{"key": "tenant:*", "rate": "1/min", "burst": 5}],
    }
    from datetime import UTC, datetime

    from rota.infrastructure.clock import ManualClock

    clock = ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))  # tokens come back with time
    with rota.open(tmp_path / "keys.db", config=config, clock=clock) as s:
        s.register("blocking", executor=Blocking())
        for tenant, works in (("a", 3), ("b", 2), ("c", 1), ("d", 1), ("e", 1)):
            for n in range(works + (1 if tenant == "a" else 0)):
                s.submit(f"{tenant}{n}", binding="blocking", keys=[f"tenant:{tenant}"])
        s.tick()
        found = CollectorRegistry(auto_describe=False)
        found.register(RotaCollector(s, key_labels=2))
        got = samples(generate_latest(found).decode())
        release.set()
    in_use = {dict(k[1])["key"]: v for k, v in got.items() if k[0] == "rota_key_in_use"}
    assert in_use == {"tenant:a": 3, "tenant:b": 2, "other": 3}
    limits = {dict(k[1])["key"]: v for k, v in got.items() if k[0] == "rota_key_limit"}
    assert limits == {"tenant:a": 3, "tenant:b": 3, "other": 9}
    held = {dict(k[1])["key"]: v for k, v in got.items() if k[0] == "rota_key_waiting"}
    assert held == {"tenant:a": 1, "tenant:b": 0, "other": 0}
    tokens = {dict(k[1])["bucket"]: v for k, v in got.items() if k[0] == "rota_rate_tokens"}
    assert tokens == {"tenant:a": 2, "tenant:b": 3, "other": 12}
    assert got[("rota_works_waiting", (("code", "capacity_key"),))] == 1
    assert got[("rota_flow_paused", (("target", "key"),))] == 0


def test_retention_metrics_follow_a_prune(idle_api: Api, tmp_path: Path) -> None:
    from datetime import timedelta

    from rota.domain.events import RetentionPolicy
    from rota.replay import retention

    s = idle_api.scheduler
    s.submit("r", binding="echo", input={"pad": "p" * 5000})
    s.run_until_idle(timeout=30)
    got = samples(scrape(idle_api))
    assert got[("rota_retention_bytes", (("state", "pruned"),))] == 0
    assert ("rota_retention_last_prune_timestamp_seconds", ()) not in got
    store = s.store
    policy = RetentionPolicy(name="p", keep_days=1)
    done = retention.run(store, [policy], store.now() + timedelta(days=2), tmp_path / "a")
    assert done.events > 0
    got = samples(scrape(idle_api))
    assert got[("rota_retention_bytes", (("state", "pruned"),))] == done.bytes_freed > 5000
    assert got[("rota_retention_last_prune_timestamp_seconds", ())] > 0
