"""The web view shows flow control (over plain HTTP, no browser needed): a Work's priority,
keys and why it waits; the capacity page's concurrency keys and rate buckets."""

from __future__ import annotations

import re

from .test_web_forms import signed_in
from .world import World


def test_a_work_page_shows_its_priority_keys_and_why_it_waits(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    first = c.get("/ui/work/report-daily").text  # running: it went first, by priority
    assert '<dd class="priority">2</dd>' in first
    assert "priority 2, flow tenant:bi, keys tenant:bi" in first  # explain, on the page
    page = c.get("/ui/work/report-weekly").text
    assert '<dd class="priority">0</dd>' in page
    keys = re.search(r'<dd class="keys">(.*?)</dd>', page, re.S)
    assert keys is not None and "<code>tenant:bi</code>" in keys.group(1)
    view = world.scheduler.work("report-weekly")
    assert view is not None and view.waiting is not None
    waiting = re.search(r'<dd class="waiting">(.*?)</dd>', page, re.S)
    assert waiting is not None and f"<code>{view.waiting.code}</code>" in waiting.group(1)
    assert "flow tenant:bi, keys tenant:bi" in page
    # a Work without keys shows its priority, and no keys row
    plain = c.get("/ui/work/sync-orders").text
    assert '<dd class="priority">0</dd>' in plain and 'class="keys"' not in plain


def test_the_capacity_page_shows_keys_and_buckets(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    page = c.get("/ui/capacity").text
    row = re.search(r'<tr data-key="tenant:bi">(.*?)</tr>', page, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
    assert cells == ["1", "2", "0", "0"]  # in use, limit, waiting, would wait now
    bucket = re.search(r'<tr data-bucket="tenant:bi">(.*?)</tr>', page, re.S)
    assert bucket is not None
    assert "<td>6/hour</td>" in bucket.group(1)
    shown = world.scheduler.capacity()["buckets"]["tenant:bi"]
    assert f'<td class="num">{shown["tokens"]:.1f}</td>' in bucket.group(1)
    assert shown["burst"] == 5 and 4 < shown["tokens"] < 5 and shown["next_token"]
    assert 'class="compact paused"' not in page  # nothing paused: no table


def test_a_pause_is_listed_on_the_capacity_page(server: str, world: World) -> None:
    from rota.application.ports.records import NewEvent
    from rota.domain.events.flow import FlowPaused

    paused = FlowPaused(target="key", name="tenant:bi", reason="quarterly close")
    world.scheduler.store.append([NewEvent("flow/pauses", paused)])
    c, _ = signed_in(server, world.secrets["read"])
    page = c.get("/ui/capacity").text
    row = re.search(r'<tr data-paused="key:tenant:bi">(.*?)</tr>', page, re.S)
    assert row is not None and "quarterly close" in row.group(1)
