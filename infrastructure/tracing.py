"""OpenTelemetry spans for attempts (the optional extra `rota[otel]`), derived from the
events this process appended, and the W3C trace context a launch hands its job.

`attempt_tracer()` is None when `opentelemetry` cannot be imported: then nothing is traced
and nothing else changes. Otherwise `AttemptTracer` is an append observer: a claim (or a
resume, a recovery, a relaunch) this process appended opens a span `rota.attempt` for that
attempt's epoch, started at the event's recorded time; the attempt's outcome, loss,
release, interrupt or cancellation ends it at its recorded time (a failure, timeout or loss
with status ERROR and the error code as description). `headers(execution, epoch)` is the
`traceparent` (and `tracestate`) of the open span, which a launch passes to its executor
(`ctx.trace`; the shell executor sets $TRACEPARENT and $TRACESTATE). Spans go to the
tracer provider set when the scheduler is built (the global one unless one is given);
with only the API and no SDK provider set, `attempt_tracer()` is None as well.

A schedule's fire (`core.schedule.fired`) is traced as a span `rota.schedule.fire` of no
duration; other events can be added (`add_instant`).
Attributes are identifiers and names only (work, execution, epoch, binding, position,
outcome, error code): never a payload, an environment value or a secret.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from rota.application.ports import RecordedEvent
from rota.domain.events.carried import invoke_marker

SPAN_NAME = "rota.attempt"
ENDS = {
    "core.execution.lost": "lost",
    "core.execution.released": "released",
    "core.execution.interrupted": "interrupted",
}
ERRORS = frozenset({"failed", "timed_out", "lost"})
OUTCOMES = frozenset({
    "core.execution.completed", "core.execution.failed", "core.execution.handed_off",
    "core.execution.parked", "core.execution.timed_out",
})  # fmt: skip
BEGINS = frozenset({"core.execution.claimed", "core.execution.resumed", "core.execution.recovered"})
MARKS = frozenset({"core.execution.adopted", "core.execution.invoked"})
TRACED = BEGINS | MARKS | OUTCOMES | set(ENDS) | {"core.work.cancelled"}
# An instant span: event type -> (span name, attributes) for the recorded event.
Instant = Callable[[RecordedEvent], tuple[str, dict[str, str | int | bool]]]


def _schedule_fire(r: RecordedEvent) -> tuple[str, dict[str, str | int | bool]]:
    """A schedule's fire: its name, nominal time, the Work it fed, manual or backfill."""
    event = r.event
    nominal = getattr(event, "nominal", None)
    return "rota.schedule.fire", {
        "rota.schedule": str(getattr(event, "name", "")),
        "rota.nominal": nominal.isoformat() if nominal is not None else "",
        "rota.work": str(getattr(event, "work_id", "")),
        "rota.position": r.position,
        "rota.manual": bool(getattr(event, "manual", False)),
        "rota.backfill": bool(getattr(event, "backfill", False)),
    }


INSTANTS: dict[str, Instant] = {"core.schedule.fired": _schedule_fire}


def add_instant(event_type: str, span: Instant) -> None:
    """Trace every `event_type` this process appends as a span of no duration."""
    INSTANTS[event_type] = span


def _ns(recorded: RecordedEvent) -> int:
    moment = recorded.recorded_time
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


class AttemptTracer:
    """Opens and ends one span per attempt epoch from the events appended (see above)."""

    def __init__(
        self,
        tracer: Any,
        propagator: Any,
        *,
        in_context: Callable[[Any], Any],
        error_status: Callable[[str], Any],
    ) -> None:
        """`tracer` and `propagator` are OpenTelemetry's; `in_context(span)` is the context
        holding `span`, `error_status(description)` an ERROR status (`attempt_tracer`)."""
        self._tracer, self._propagator = tracer, propagator
        self._in_context, self._error_status = in_context, error_status
        self._open: dict[str, tuple[int, Any]] = {}  # execution -> (epoch, span)
        self._lock = threading.Lock()

    # -- the observer ------------------------------------------------------------------

    def __call__(self, recorded: Sequence[RecordedEvent]) -> None:
        with self._lock:
            for r in recorded:
                if r.type in TRACED or r.type in INSTANTS:
                    self._observe(r)

    def _observe(self, r: RecordedEvent) -> None:
        event, kind = r.event, r.type
        work = getattr(event, "work_id", None)
        attempt = getattr(event, "attempt", None)
        if kind in INSTANTS:
            name, attributes = INSTANTS[kind](r)
            span = self._tracer.start_span(name, attributes=attributes, start_time=_ns(r))
            span.end(end_time=_ns(r))
        elif kind == "core.work.cancelled" and isinstance(work, str):
            for execution in [e for e in self._open if e.rpartition("/")[0] == work]:
                self._end(execution, r, "cancelled")
        if not isinstance(work, str) or not isinstance(attempt, int):
            return
        execution = f"{work}/{attempt}"
        if kind == "core.execution.claimed":
            binding = event.pinned.binding.name  # type: ignore[attr-defined]
            self._begin(execution, r, "start", {"rota.binding": binding})
            if invoke_marker(event) is not None:  # (the marker a claim carries)
                self._mark(execution, r, "invoked")
        elif kind == "core.execution.resumed":
            self._begin(execution, r, "resume", {})
        elif kind == "core.execution.recovered":
            segment = "relaunched" if event.mode == "relaunch" else "recovered"  # type: ignore[attr-defined]
            self._end(execution, r, "superseded")
            self._begin(execution, r, segment, {"rota.recovery_reason": event.reason})  # type: ignore[attr-defined]
        elif kind in MARKS:
            self._mark(execution, r, kind.rpartition(".")[2])
        elif kind in OUTCOMES:
            self._end(execution, r, type(event).outcome_name)  # type: ignore[attr-defined]
        elif kind in ENDS:
            self._end(execution, r, ENDS[kind])

    def _begin(
        self, execution: str, r: RecordedEvent, segment: str, attributes: dict[str, str]
    ) -> None:
        epoch = int(getattr(r.event, "epoch", 0))
        span = self._tracer.start_span(
            SPAN_NAME,
            attributes={
                "rota.work": execution.rpartition("/")[0],
                "rota.execution": execution,
                "rota.epoch": epoch,
                "rota.segment": segment,
                "rota.position": r.position,
                **attributes,
            },
            start_time=_ns(r),
        )
        if span.is_recording():  # a no-op provider's span is neither kept nor propagated
            self._open[execution] = (epoch, span)

    def _mark(self, execution: str, r: RecordedEvent, name: str) -> None:
        opened = self._open.get(execution)
        if opened is not None:
            opened[1].add_event(name, {"rota.position": r.position}, timestamp=_ns(r))

    def _end(self, execution: str, r: RecordedEvent, outcome: str) -> None:
        opened = self._open.pop(execution, None)
        if opened is None:
            return
        span = opened[1]
        span.set_attribute("rota.outcome", outcome)
        if outcome in ERRORS:
            code = getattr(r.event, "error_code", outcome)
            span.set_status(self._error_status(str(code)))
        span.end(end_time=_ns(r))

    # -- the launch's trace context ----------------------------------------------------

    def headers(self, execution_id: str, epoch: int) -> dict[str, str]:
        """The W3C trace context of the open span of this attempt's epoch, or {}."""
        with self._lock:
            opened = self._open.get(execution_id)
        if opened is None or opened[0] != epoch:
            return {}
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._in_context(opened[1]))
        return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate") and v}

    def open_spans(self) -> int:
        with self._lock:
            return len(self._open)


def attempt_tracer(tracer_provider: Any = None) -> AttemptTracer | None:
    """An `AttemptTracer` on `tracer_provider` (default: the global one as set now), or
    None when the OpenTelemetry API is not installed or no SDK provider is set (then
    tracing is off, at no cost: a provider set later does not trace this scheduler)."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None

    def error_status(description: str) -> Any:
        return trace.Status(trace.StatusCode.ERROR, description)

    return AttemptTracer(
        provider.get_tracer("rota"),
        TraceContextTextMapPropagator(),
        in_context=trace.set_span_in_context,
        error_status=error_status,
    )


__all__ = ["INSTANTS", "SPAN_NAME", "AttemptTracer", "add_instant", "attempt_tracer"]
