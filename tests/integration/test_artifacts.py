"""Artifact references end to end: a callable (its context helper and its Result) and a shell
job record them; the outcome event, the history projection, the views, `rota work show`,
the export and the HTTP API (with its OpenAPI schema) keep them; a failed attempt keeps
what it added; a bad one fails the attempt `invalid_result` with nothing stored."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_api.conftest import Api, start_api

import rota
from integration.cli_process import rota as run_rota
from rota.http.app import OPENAPI_URL
from rota.replay.explain import work_story
from rota.replay.export import export

SHA = "sha256:" + "ab" * 32
REPORT = rota.Artifact(name="report.html", uri="s3://reports/2026/r.html", digest=SHA, size=42)
LOG = rota.Artifact(name="logs/run.txt", uri="file:///var/log/run.txt")
PAGE = rota.Artifact(name="page", uri="https://example.com/p.html")


def build(ctx: rota.LaunchContext) -> rota.Result:
    ctx.add_artifact("logs/run.txt", "file:///var/log/run.txt")
    return rota.Result(data={"rows": 3}, artifacts=[REPORT])


def crash(ctx: rota.LaunchContext) -> None:
    ctx.add_artifact("logs/run.txt", "file:///var/log/run.txt")
    raise rota.Fail("upstream_down", "the upstream answered 503")


def leaky(ctx: rota.LaunchContext) -> rota.Result:
    return rota.Result(artifacts=[rota.Artifact(name="x", uri="https://user:pw@host/x")])


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[rota.Scheduler]:
    with rota.open(tmp_path / "rota.db", owner="artifacts") as s:
        s.register("build", build, inline=True)
        s.register("crash", crash, inline=True, retry=rota.RetryPolicy(max_attempts=1))
        s.register("leaky", leaky, inline=True)
        s.register("publish", lambda ctx: rota.Result(artifacts=[PAGE]), inline=True)
        s.submit("built", binding="build")
        s.submit("crashed", binding="crash")
        s.submit("leaked", binding="leaky")
        s.submit("published", binding="publish")
        s.run_until_idle(timeout=30)
        yield s


def test_a_callables_references_are_in_the_event_the_view_and_the_history(
    scheduler: rota.Scheduler,
) -> None:
    view = scheduler.work("built")
    assert view is not None and view.state == "completed"
    assert view.attempts[0].artifacts == (LOG, REPORT)  # the helper's first
    (completed,) = [
        e
        for e in scheduler.events()
        if e.type == "core.execution.completed" and e.data["work_id"] == "built"
    ]
    assert completed.data["artifacts"] == [
        {"name": "logs/run.txt", "uri": "file:///var/log/run.txt", "digest": None, "size": None},
        {"name": "report.html", "uri": "s3://reports/2026/r.html", "digest": SHA, "size": 42},
    ]
    _, history, _ = work_story(scheduler.store, "built")
    record = history.attempt("built", 1)
    assert record is not None and record.outcome is not None
    assert record.outcome.kind == "completed"
    assert record.outcome.artifacts == [LOG, REPORT]
    # The JSON view (`rota work show --json`) holds them as objects.
    shown = json.loads(view.to_json())
    assert shown["attempts"][0]["artifacts"][1] == {
        "name": "report.html",
        "uri": "s3://reports/2026/r.html",
        "digest": SHA,
        "size": 42,
    }


def test_a_failed_attempt_keeps_what_it_added_and_a_bad_reference_stores_nothing(
    scheduler: rota.Scheduler,
) -> None:
    crashed = scheduler.work("crashed")
    assert crashed is not None and crashed.attempts[0].outcome == "failed"
    assert crashed.attempts[0].error is not None
    assert crashed.attempts[0].error.code == "upstream_down"
    assert crashed.attempts[0].artifacts == (LOG,)
    leaked = scheduler.work("leaked")
    assert leaked is not None and leaked.attempts[0].error is not None
    assert leaked.attempts[0].error.code == "invalid_result"
    assert "user information" in leaked.attempts[0].error.message
    assert leaked.attempts[0].artifacts == ()
    out = io.BytesIO()
    export(scheduler.store, out)
    assert b"user:pw" not in out.getvalue()


def test_the_export_and_rota_work_show_carry_them(
    scheduler: rota.Scheduler, tmp_path: Path
) -> None:
    out = io.BytesIO()
    export(scheduler.store, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()[1:]]
    payloads = [json.loads(r["data"]) for r in lines if r["type"] == "core.execution.completed"]
    assert any(p.get("artifacts") and p["artifacts"][1]["digest"] == SHA for p in payloads)
    scheduler.close()
    (tmp_path / "rota.toml").write_text('[store]\nurl = "rota.db"\n')
    shown = run_rota(tmp_path, "work", "show", "built")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert f"    artifact report.html: s3://reports/2026/r.html ({SHA}, 42 bytes)" in text
    assert "    artifact logs/run.txt: file:///var/log/run.txt\n" in text


def test_a_shell_job_declares_them_in_its_result_line(tmp_path: Path) -> None:
    line = json.dumps(
        {"rota.result": {"artifacts": [{"name": "out.csv", "uri": "s3://b/out.csv", "size": 7}]}}
    )
    with rota.open(tmp_path / "shell.db") as scheduler:
        scheduler.bind("job", executor="shell", config={"command": ["echo", line]})
        scheduler.submit("w", binding="job")
        scheduler.run_until_idle(timeout=60)
        view = scheduler.work("w")
    assert view is not None and view.state == "completed", view
    assert view.attempts[0].artifacts == (
        rota.Artifact(name="out.csv", uri="s3://b/out.csv", size=7),
    )


@pytest.fixture
def api(scheduler: rota.Scheduler, tmp_path: Path) -> Iterator[Api]:
    served = start_api(scheduler, tmp_path)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        served.server.stop()


def test_the_http_api_serves_them_typed_and_the_openapi_document_describes_them(
    api: Api,
) -> None:
    client = api.client("read")
    detail = client.get("/v1/work/built").json()
    assert [a["name"] for a in detail["work"]["attempts"][0]["artifacts"]] == [
        "logs/run.txt",
        "report.html",
    ]
    answer = client.get("/v1/work/built/artifacts")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "work": "built",
        "artifacts": [
            {"attempt": 1, "execution": "built/1", "name": "logs/run.txt",
             "uri": "file:///var/log/run.txt", "digest": None, "size": None},
            {"attempt": 1, "execution": "built/1", "name": "report.html",
             "uri": "s3://reports/2026/r.html", "digest": SHA, "size": 42},
        ],
    }  # fmt: skip
    missing = client.get("/v1/work/nope/artifacts")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_work"
    document = client.get(OPENAPI_URL).json()
    assert "/v1/work/{work_id}/artifacts" in document["paths"]
    schema = document["components"]["schemas"]["ArtifactRef"]
    assert set(schema["properties"]) == {"attempt", "execution", "name", "uri", "digest", "size"}
    submit = document["components"]["schemas"]["SubmitBody"]
    assert "grants" in submit["properties"]


def test_http_submit_takes_grants_and_refuses_an_undefined_one(api: Api) -> None:
    api.scheduler.grant("audit", config={"mode": "append"})
    client = api.client("operate")
    body = {"work": "g", "binding": "build", "grants": ["audit"]}
    ok = client.post("/v1/works", json=body, headers={"Idempotency-Key": "g-1"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["work"]["grants"] == ["audit"]
    head = api.head()
    body = {"work": "h", "binding": "build", "grants": ["no"]}
    refused = client.post("/v1/works", json=body, headers={"Idempotency-Key": "h-1"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "unknown_grant"
    assert api.head() == head


def test_the_web_work_page_lists_them_linking_only_http_references(api: Api) -> None:
    from browser.test_web_forms import signed_in

    browser, _ = signed_in(api.url, api.tokens["read"])
    try:
        page = browser.get("/ui/work/built")
        published = browser.get("/ui/work/published")
    finally:
        browser.close()
    assert page.status_code == 200, page.text[:300]
    assert "<code>report.html</code>" in page.text
    assert "<code>s3://reports/2026/r.html</code>" in page.text  # not a link: not http(s)
    assert f'title="{SHA}"' in page.text and '<td class="num">42</td>' in page.text
    assert "<code>file:///var/log/run.txt</code>" in page.text
    link = '<a href="https://example.com/p.html" rel="noreferrer noopener">'
    assert link in published.text
