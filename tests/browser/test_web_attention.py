"""What the web view points a person at, over plain HTTP (no browser needed): a failed
attempt's error and stderr tail, failed Work in Needs you, the Works by last activity with
id search, the event browser, auto-refresh and how to turn it off, a schedule's Work
linking to its schedule and nominal time, and the charts."""

from __future__ import annotations

import re
from html import unescape

import httpx

from .test_web_forms import client, listed, signed_in
from .world import World


def text(page: httpx.Response) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", page.text))


def attribute(page: str, name: str, selector_class: str) -> list[str]:
    """The `name` attribute of each element whose class starts with `selector_class`."""
    found = re.findall(rf'class="{selector_class}[^"]*"[^>]*?{name}="([^"]*)"', page)
    return [unescape(v) for v in found]


def test_a_failed_shell_attempt_shows_its_error_and_stderr_tail(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    page = c.get("/ui/work/migrate-db").text
    failure = page[
        page.index('id="failure"') : page.index("</section>", page.index('id="failure"'))
    ]
    assert '<code class="failure-code">exit_3</code>' in failure
    assert "exit status 3" in failure
    stderr = re.search(r'<pre class="tail" id="stderr-tail">(.*?)</pre>', failure, re.S)
    assert stderr is not None
    assert unescape(stderr.group(1)).splitlines() == [
        'psql: ERROR:  relation "orders_archive" does not exist',
        "migration 0042_orders_fk failed; rolled back",
    ]
    assert "applying 0042_orders_fk" in failure  # stdout too, folded
    # a callable's own failure: its code and message, and no tail
    page = c.get("/ui/work/deploy-web").text
    assert '<code class="failure-code">rollout_failed</code>' in page
    assert "kubectl rollout status: deadline exceeded" in page
    assert 'id="stderr-tail"' not in page
    # a Work that never failed has no such card
    assert 'id="failure"' not in c.get("/ui/work/build-1842").text


def test_failed_work_counts_in_needs_you_and_a_retry_clears_it(server: str, world: World) -> None:
    c, csrf = signed_in(server, world.secrets["operate"])
    page = c.get("/ui/needs-you").text
    rows = re.findall(r'<tr class="failed-row" data-work="([^"]+)"', page)
    assert set(rows) == {"migrate-db", "deploy-web", "ingest-feed"}
    assert rows[0] == "ingest-feed"  # the newest failure first
    assert re.search(r'id="failed-count">3<', page)
    assert "retries exhausted (1 of 1)" in text(c.get("/ui/needs-you"))
    assert "lost, not retried" in text(c.get("/ui/needs-you"))
    overview = c.get("/ui/").text
    tile = re.search(r'id="tile-needs-you"[^>]*><span class="figure">(\d+)<', overview)
    assert tile is not None and tile.group(1) == "5"  # two holds and three failed Works
    assert re.search(r'id="needs-you-failed">3<', overview)
    for path in ("/ui/works", "/ui/events", "/ui/work/build-1842"):  # the nav's badge
        assert re.search(r'id="nav-attention"[^>]*>5<', c.get(path).text), path
    answer = c.post(
        "/ui/work/migrate-db/retry",
        data={"csrf": csrf, "next": "/ui/needs-you"},
        headers={"Origin": server},
    )
    assert answer.status_code == 303
    page = c.get("/ui/needs-you").text
    rows = re.findall(r'<tr class="failed-row" data-work="([^"]+)"', page)
    assert set(rows) == {"deploy-web", "ingest-feed"}
    assert re.search(r'id="nav-attention"[^>]*>4<', page)
    assert world.scheduler.work("migrate-db").state != "failed"  # type: ignore[union-attr]


def test_works_by_last_activity_with_times_and_id_search(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    scheduler = world.scheduler
    newest: dict[str, int] = {}
    for event in scheduler.events():
        if event.stream.startswith("work/"):
            newest[event.stream[5:]] = event.position
    by_recency = sorted(newest, key=lambda w: -newest[w])
    page = c.get("/ui/works").text
    assert 'data-sort="recent"' in page
    assert listed(page) == by_recency[:16]
    # pages of 4 by activity: every Work once, in the same order
    seen: list[str] = []
    query: dict[str, str | int] = {"limit": 4}
    for _ in range(10):
        page = c.get("/ui/works", params=query).text
        seen += listed(page)
        following = re.search(r'rel="next" href="[^"]*before=(\d+)"', page)
        if following is None:
            break
        query = {"limit": 4, "before": following.group(1)}
    assert seen == by_recency
    # the submitted and last-activity columns
    page = c.get("/ui/works", params={"sort": "id", "q": "sync"}).text
    row = re.search(r'<tr class="work-row" data-work="sync-orders">(.*?)</tr>', page, re.S)
    assert row is not None
    view = scheduler.work("sync-orders")
    assert view is not None and view.submitted_at is not None
    assert "2026-11-03 " + view.submitted_at[11:19] in row.group(1)
    last = [e for e in scheduler.events() if e.stream == "work/sync-orders"][-1]
    assert f'data-at="{last.recorded_at}"' in row.group(1) and last.type in row.group(1)
    # why a ready Work waits, as before
    waiting = scheduler.work("report-weekly")
    assert waiting is not None and waiting.waiting is not None
    page = c.get("/ui/works", params={"q": "report-weekly", "limit": 1, "sort": "id"})
    assert page.status_code == 303  # a whole id opens the Work; part of it lists
    page = c.get("/ui/works", params={"q": "report-week"}).text
    row = re.search(r'<tr class="work-row" data-work="report-weekly">(.*?)</tr>', page, re.S)
    assert row is not None and f'<td class="quiet">{waiting.waiting.code}</td>' in row.group(1)
    # search: part of an id lists the Works holding it, in either order
    assert listed(c.get("/ui/works", params={"q": "report", "sort": "id"}).text) == [
        "report-daily",
        "report-monthly",
        "report-weekly",
    ]
    assert set(listed(c.get("/ui/works", params={"q": "report"}).text)) == {
        "report-daily",
        "report-monthly",
        "report-weekly",
    }
    assert listed(c.get("/ui/works", params={"q": "nothing-like-it"}).text) == []
    # a whole id opens the Work
    answer = c.get("/ui/works", params={"q": "deploy-web"})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/work/deploy-web"


def test_the_event_browser_pages_the_log_newest_first_and_filters(
    server: str, world: World
) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    head = world.scheduler.store.head().position
    seen: list[int] = []
    query: dict[str, str | int] = {"limit": 40}
    for _ in range(20):
        page = c.get("/ui/events", params=query).text
        seen += [int(p) for p in re.findall(r'class="event-row" data-position="(\d+)"', page)]
        following = re.search(r'rel="next" href="[^"]*before=(\d+)"', page)
        if following is None:
            break
        query = {"limit": 40, "before": following.group(1)}
    assert seen == list(range(head, 0, -1))
    page = c.get("/ui/events", params={"stream": "work/deploy-web"}).text
    positions = [int(p) for p in re.findall(r'data-position="(\d+)"', page)]
    expected = [e.position for e in world.scheduler.events() if e.stream == "work/deploy-web"]
    assert positions == expected[::-1]
    page = c.get("/ui/events", params={"type": "core.schedule."}).text
    types = set(re.findall(r'class="event-row" data-position="\d+" data-type="([^"]+)"', page))
    assert types and all(t.startswith("core.schedule.") for t in types)
    assert "core.schedule.fired" in types
    # a Work's stream links to its page
    page = c.get("/ui/events", params={"stream": "work/deploy-web", "limit": 1}).text
    assert 'href="/ui/work/deploy-web">work/deploy-web</a>' in page


def test_auto_refresh_is_on_until_a_link_turns_it_off(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    page = c.get("/ui/works").text
    assert '<meta http-equiv="refresh" content="30">' in page
    assert "<script" not in page
    off = re.search(r'href="(/ui/refresh\?every=0&amp;next=[^"]+)" id="refresh-off"', page)
    assert off is not None
    answer = c.get(unescape(off.group(1)))
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/works"
    assert "rota_refresh=0" in answer.headers["set-cookie"]
    assert "httponly" in answer.headers["set-cookie"].lower()
    page = c.get("/ui/works").text
    assert 'http-equiv="refresh"' not in page and 'id="refresh-on"' in page
    for path in ("/ui/", "/ui/work/deploy-web", "/ui/events"):
        assert 'http-equiv="refresh"' not in c.get(path).text  # off everywhere
    c.get("/ui/refresh", params={"every": 10, "next": "/ui/"})
    assert '<meta http-equiv="refresh" content="10">' in c.get("/ui/events").text
    # a strange period is off; a foreign next goes home
    answer = c.get("/ui/refresh", params={"every": 7, "next": "https://evil.example/"})
    assert answer.headers["location"] == "/ui/" and "rota_refresh=0" in answer.headers["set-cookie"]
    # without a session the switch is sign-in, as every page
    answer = client(server).get("/ui/refresh", params={"every": 0, "next": "/ui/works"})
    assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/sign-in")
    assert "set-cookie" not in answer.headers
    # the sign-in form and error pages never refresh
    assert 'http-equiv="refresh"' not in client(server).get("/ui/sign-in").text
    c.get("/ui/refresh", params={"every": 30})
    assert 'http-equiv="refresh"' not in c.get("/ui/work/no-such").text


def test_a_schedule_s_work_links_to_its_schedule_and_nominal_time(
    server: str, world: World
) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    (work_id,) = [w.id for w in world.scheduler.works() if w.id.startswith("schedule.")]
    page = c.get(f"/ui/work/{work_id}").text
    assert 'href="/ui/schedules/hourly-sync" id="work-schedule"' in page
    (fire,) = re.findall(
        r'<tr class="fire-row" data-schedule="([^"]+)" data-nominal="([^"]+)"', page
    )
    fired = [e for e in world.scheduler.events() if e.type == "core.schedule.fired"]
    assert fire[0] == "hourly-sync" and fire[1] == fired[-1].data["nominal"]
    anchor = re.search(r'href="/ui/schedules/hourly-sync#(at-[^"]+)" class="nominal"', page)
    assert anchor is not None and anchor.group(1) == "at-2026-11-03T09:14:32"
    assert '</a> <span class="quiet">(manual)</span>' in page  # Trigger now, not a nominal time
    schedule = c.get("/ui/schedules/hourly-sync").text
    assert f'id="{anchor.group(1)}"' in schedule
    # a Work no schedule feeds says nothing of one
    assert 'id="work-schedule"' not in c.get("/ui/work/deploy-web").text


def test_the_charts_are_svg_drawn_from_the_series(server: str, world: World) -> None:
    c, _ = signed_in(server, world.secrets["read"])
    page = c.get("/ui/charts").text
    assert "<script" not in page
    assert re.findall(r'<svg class="chart" data-chart="([a-z]+)"', page) == [
        "throughput",
        "failures",
        "latency",
    ]
    series = world.scheduler.queries.series.over_time(
        world.scheduler.queries.state.now(), hours=24, buckets=24
    )
    completed = [int(v) for v in attribute(page, "data-value", "bar bar-completed")]
    failed = [int(v) for v in attribute(page, "data-value", "bar bar-failed")]
    assert completed == [b.completed for b in series.buckets]
    assert failed == [b.failed for b in series.buckets]
    outcomes = [e for e in world.scheduler.events() if e.type.startswith("core.execution.")]
    assert sum(completed) == sum(1 for e in outcomes if e.type == "core.execution.completed")
    assert sum(failed) == sum(
        1 for e in outcomes if e.type.rsplit(".", 1)[1] in ("failed", "timed_out", "lost")
    )
    bindings = set(attribute(page, "data-binding", "point"))
    assert {"build", "migrate", "deploy"} <= bindings
    assert 'class="window"' in page and "7 days" in page
    assert len(re.findall(r'class="bar bar-completed"', c.get("/ui/charts?hours=1").text)) == 12
