"""Attempt spans (rota[otel]) with the SDK's in-memory exporter: one span per attempt epoch
from its claim to its outcome, the W3C trace context handed to a shell job as
$TRACEPARENT (and written nowhere else), and a no-op when OpenTelemetry is missing."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="rota[otel] test dependency")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rota
from rota import bootstrap
from rota.application.ports import RecordedEvent
from rota.domain.events.execution import AttemptCompleted
from rota.domain.events.recovery import AttemptRecovered
from rota.domain.events.retry import RetryFired
from rota.infrastructure import tracing
from rota.infrastructure.tracing import INSTANTS, SPAN_NAME, add_instant, attempt_tracer


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Spans of every scheduler opened in the test, through the composition root."""
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(bootstrap, "attempt_tracer", lambda: attempt_tracer(provider))
    yield exported
    provider.shutdown()


def _spans(exported: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {str(s.attributes["rota.execution"]): s for s in exported.get_finished_spans()}


def _ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def test_each_attempt_is_a_span_from_its_claim_to_its_outcome(
    exporter: InMemorySpanExporter,
) -> None:
    def flaky(ctx: rota.LaunchContext) -> str:
        if ctx.work_id == "bad":
            raise rota.Fail("upstream_down", "the upstream is down", permanent=True)
        return "ok"

    with rota.open("memory://") as scheduler:
        scheduler.register("job", flaky)
        scheduler.submit("good", binding="job")
        scheduler.submit("bad", binding="job")
        scheduler.run_until_idle(timeout=30)
        events = scheduler.events(limit=1000)
    spans = _spans(exporter)
    assert set(spans) == {"good/1", "bad/1"}
    good, bad = spans["good/1"], spans["bad/1"]
    assert good.name == bad.name == SPAN_NAME
    assert dict(good.attributes or {}) == {
        "rota.work": "good", "rota.execution": "good/1", "rota.epoch": 1,
        "rota.segment": "start", "rota.position": good.attributes["rota.position"],  # type: ignore[index]
        "rota.binding": "job", "rota.outcome": "completed",
    }  # fmt: skip
    assert good.status.status_code == trace.StatusCode.UNSET
    assert bad.status.status_code == trace.StatusCode.ERROR
    assert bad.status.description == "upstream_down"
    # Its times are the log's: the claim's and the outcome's recorded times.
    claim = next(
        e for e in events if e.type == "core.execution.claimed" and e.data["work_id"] == "good"
    )
    done = next(e for e in events if e.type == "core.execution.completed")
    assert (good.start_time, good.end_time) == (_ns(claim.recorded_at), _ns(done.recorded_at))
    assert [e.name for e in good.events] == ["invoked"]


def test_a_shell_job_gets_its_spans_traceparent_and_the_log_does_not(
    tmp_path: Path, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    seen = tmp_path / "traceparent"
    config = {"bindings": [{
        "name": "sh", "executor": "shell",
        "command": ["sh", "-c", f'printf %s "$TRACEPARENT" > {seen}'],
    }]}  # fmt: skip
    caplog.set_level(logging.DEBUG)
    with rota.open(tmp_path / "s.db", config=config) as scheduler:
        scheduler.submit("w", binding="sh")
        scheduler.run_until_idle(timeout=60)
        assert scheduler.work("w").state == "completed"  # type: ignore[union-attr]
    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    flags = f"{context.trace_flags:02x}"
    assert seen.read_text() == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"
    trace_id = f"{context.trace_id:032x}".encode()
    written = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p != seen)
    assert trace_id not in written  # not in the log, nor the projections
    assert all(trace_id.decode() not in r.getMessage() for r in caplog.records)


def test_without_opentelemetry_nothing_is_traced_and_jobs_run_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # `import opentelemetry` fails
    assert tracing.attempt_tracer() is None
    seen = tmp_path / "traceparent"
    config = {"bindings": [{
        "name": "sh", "executor": "shell",
        "command": ["sh", "-c", f'printf %s "${{TRACEPARENT-unset}}" > {seen}'],
    }]}  # fmt: skip
    with rota.open("memory://", config=config) as scheduler:
        assert scheduler.host.launches.trace_context is None
        scheduler.submit("w", binding="sh")
        scheduler.run_until_idle(timeout=60)
        assert scheduler.work("w").state == "completed"  # type: ignore[union-attr]
    assert seen.read_text() == "unset"


def test_with_the_api_alone_nothing_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    assert attempt_tracer(trace.NoOpTracerProvider()) is None
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)  # none set
    assert attempt_tracer() is None


def test_a_span_that_does_not_record_is_not_kept_nor_propagated() -> None:
    tracer = tracing.AttemptTracer(
        trace.NoOpTracer(), None, in_context=trace.set_span_in_context, error_status=str
    )
    tracer([_recorded(_claim(), 1)])
    assert tracer.open_spans() == 0 and tracer.headers("w/1", 1) == {}


def test_every_outcome_event_ends_a_span() -> None:
    from rota.domain.events import ALL_EVENTS

    outcomes = {kind.tag() for kind in ALL_EVENTS if hasattr(kind, "outcome_name")}
    assert outcomes == tracing.OUTCOMES


# -- the tracer on recorded events built here -------------------------------------------

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _recorded(event: Any, position: int) -> RecordedEvent:
    at = f"2026-12-01T12:00:{position:02d}.000000Z"
    return RecordedEvent(position, "work/w", position, None, at, event)


def _claim() -> Any:
    from rota.domain.events.execution import AttemptClaimed
    from rota.domain.policy import Binding, Pinned, Registration

    pinned = Pinned(
        generation="g", binding=Binding(name="b", executor="e"),
        registration=Registration(name="e"), timeout_seconds=60, lease_seconds=30,
    )  # fmt: skip
    return AttemptClaimed(
        work_id="w", attempt=1, epoch=1, owner="a", lease_expires_at=AT, deadline=AT,
        consumed=[], trigger=None, pinned=pinned,
    )  # fmt: skip


def test_a_relaunch_ends_the_old_epochs_span_and_opens_the_next() -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracer = attempt_tracer(provider)
    assert tracer is not None
    tracer([_recorded(_claim(), 1)])
    first = tracer.headers("w/1", 1)["traceparent"]
    relaunch = AttemptRecovered(
        work_id="w", attempt=1, epoch=2, previous_epoch=1, owner="b", previous_owner="a",
        lease_expires_at=AT, mode="relaunch", reason="lease_expired",
    )  # fmt: skip
    tracer([_recorded(relaunch, 5)])
    assert tracer.headers("w/1", 1) == {}  # the old epoch has no live span
    second = tracer.headers("w/1", 2)["traceparent"]
    assert second != first
    tracer([_recorded(AttemptCompleted(work_id="w", attempt=1, epoch=2), 9)])
    old, new = sorted(exported.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert (old.attributes or {})["rota.outcome"] == "superseded"
    assert (new.attributes or {})["rota.segment"] == "relaunched"
    assert (new.attributes or {})["rota.outcome"] == "completed"
    assert new.end_time == _ns("2026-12-01T12:00:09Z") and tracer.open_spans() == 0


def test_an_instant_span_hook_traces_a_fire(monkeypatch: pytest.MonkeyPatch) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(tracing, "INSTANTS", dict(INSTANTS))
    add_instant("core.retry.fired", lambda r: ("rota.retry.fire", {"rota.work": "w"}))
    tracer = attempt_tracer(provider)
    assert tracer is not None
    tracer([_recorded(RetryFired(work_id="w", generation=1), 3)])
    (span,) = exported.get_finished_spans()
    assert span.name == "rota.retry.fire" and span.start_time == span.end_time


def test_a_schedule_s_fire_is_a_span_of_no_duration(exporter: InMemorySpanExporter) -> None:
    clock = rota.ManualClock(datetime(2026, 11, 2, 9, 0, tzinfo=UTC))
    with rota.open("memory://", clock=clock) as scheduler:
        scheduler.register("job", lambda ctx: None)
        scheduler.schedule("tick", binding="job", every="1m")
        clock.advance(61)
        scheduler.run_until_idle(timeout=30)
        fired = [e for e in scheduler.events(limit=1000) if e.type == "core.schedule.fired"]
    assert fired, "the schedule never fired"
    fires = [s for s in exporter.get_finished_spans() if s.name == "rota.schedule.fire"]
    assert [dict(s.attributes or {}) for s in fires] == [
        {
            "rota.schedule": "tick",
            "rota.nominal": "2026-11-02T09:01:00+00:00",
            "rota.work": e.data["work_id"],
            "rota.position": e.position,
            "rota.manual": False,
            "rota.backfill": False,
        }
        for e in fired
    ]
    assert all(s.start_time == s.end_time for s in fires)
