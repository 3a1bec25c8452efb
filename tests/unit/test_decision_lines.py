"""The decision log's table (event type -> line) and the formatters, on recorded events
built here: the fields every line carries, the whitelists, the fallback for a type the
table does not name, and that a payload or an exception's text never reaches a line."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rota.application.ports import RecordedEvent
from rota.domain.errors import RotaError
from rota.domain.events import ALL_EVENTS
from rota.domain.events.execution import AttemptFailed
from rota.domain.events.recovery import AttemptRecovered
from rota.domain.events.retry import RetryArmed
from rota.domain.events.work import InputAccepted
from rota.infrastructure.decision_lines import (
    DECISIONS,
    FIELDS_ATTRIBUTE,
    LINES,
    OTHER,
    DecisionLog,
    decision_fields,
)
from rota.infrastructure.logging import (
    JsonFormatter,
    LogSettings,
    TextFormatter,
    configured,
    log_settings,
)

CANARY = "payload-canary-91d2e7"
IDENTIFYING = ("event", "work", "execution", "epoch", "position", "delivery_id")
RESERVED = {"time", "level", "logger", "message", "kind", "error_type", *IDENTIFYING}
# Attributes that hold what people or jobs wrote: never a field of a line.
UNSHOWN = {"payload", "data", "detail", "metadata", "comment", "pinned", "token", "usage"}
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def recorded(event: Any, position: int = 7, delivery_id: str | None = None) -> RecordedEvent:
    stream = f"work/{getattr(event, 'work_id', 'x')}"
    return RecordedEvent(position, stream, 3, delivery_id, "2026-12-01T12:00:00.000000Z", event)


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Any:
    logger = logging.getLogger(DECISIONS + ".test")
    handler = Captured()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield DecisionLog(logger), handler.records
    logger.removeHandler(handler)


FAILED = AttemptFailed(
    work_id="w", attempt=2, epoch=3, error_code="exit_3", error_message="process exited",
    data={"secret": CANARY}, usage={"tokens": 5.0},
)  # fmt: skip


def test_every_line_names_only_whitelisted_attributes_that_exist() -> None:
    by_tag = {kind.tag(): kind for kind in ALL_EVENTS}
    assert set(LINES) <= set(by_tag), set(LINES) - set(by_tag)
    for tag, line in LINES.items():
        attributes = set(by_tag[tag].__struct_fields__)
        assert set(line.fields.values()) <= attributes, tag
        assert not set(line.fields.values()) & UNSHOWN, tag
        assert not set(line.fields) & RESERVED, tag  # no field hides an identifying one
        assert line.level in (logging.DEBUG, logging.INFO, logging.WARNING), tag


def test_the_decisions_the_daemon_takes_are_lines_at_info_or_above() -> None:
    decisions = {
        "core.execution.claimed": "start",
        "core.execution.completed": "outcome",
        "core.execution.failed": "outcome",
        "core.execution.timed_out": "outcome",
        "core.retry.armed": "retry",
        "core.execution.recovered": "recovery",
        "core.execution.adopted": "adoption",
        "core.work.held": "hold",
        "core.budget.held": "hold",
        "core.gate.held": "gate",
        "core.control.requested": "control",
        "core.control.dispatched": "control",
    }
    for tag, kind in decisions.items():
        assert LINES[tag].kind == kind and LINES[tag].level >= logging.INFO, tag


def test_a_failure_line_carries_its_cause_and_the_identifying_fields(captured: Any) -> None:
    observe, records = captured
    observe([recorded(FAILED, position=12)])
    (record,) = records
    assert record.levelno == logging.WARNING and record.getMessage() == "attempt failed"
    fields = getattr(record, FIELDS_ATTRIBUTE)
    assert fields["kind"] == "outcome"
    assert {k: fields[k] for k in IDENTIFYING} == {
        "event": "core.execution.failed",
        "work": "w",
        "execution": "w/2",
        "epoch": 3,
        "position": 12,
        "delivery_id": None,
    }
    assert (fields["outcome"], fields["error_code"], fields["error_message"]) == (
        "failed",
        "exit_3",
        "process exited",
    )
    assert CANARY not in json.dumps(fields, default=str)  # the result's data is not shown


def test_recovery_by_relaunch_is_its_own_kind_and_adoption_stays_recovery(captured: Any) -> None:
    observe, records = captured
    common: dict[str, Any] = {
        "work_id": "w", "attempt": 1, "epoch": 2, "previous_epoch": 1, "owner": "b",
        "previous_owner": "a", "lease_expires_at": AT, "reason": "lease_expired",
    }  # fmt: skip
    observe([
        recorded(AttemptRecovered(mode="relaunch", **common)),
        recorded(AttemptRecovered(mode="adopt", **common), position=8),
    ])  # fmt: skip
    kinds = [(r.getMessage(), getattr(r, FIELDS_ATTRIBUTE)["kind"]) for r in records]
    assert kinds == [("attempt relaunched", "relaunch"), ("attempt recovered", "recovery")]
    assert getattr(records[0], FIELDS_ATTRIBUTE)["previous_epoch"] == 1


def test_retry_armed_names_the_failed_execution_and_its_due_time() -> None:
    armed = RetryArmed(work_id="w", generation=1, attempt=4, due_at=AT, ancestry=[3])
    fields = decision_fields(recorded(armed), LINES["core.retry.armed"])
    assert (fields["execution"], fields["epoch"], fields["due_at"]) == ("w/4", None, AT)


def test_an_input_is_logged_at_debug_without_its_payload(captured: Any) -> None:
    observe, records = captured
    observe([recorded(InputAccepted(work_id="w", key="k", payload={"v": CANARY}), 3, "input/w/k")])
    (record,) = records
    assert record.levelno == logging.DEBUG
    line = JsonFormatter().format(record)
    assert CANARY not in line and json.loads(line)["delivery_id"] == "input/w/k"


def test_a_type_the_table_does_not_name_is_an_event_recorded_line_at_debug(
    captured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    observe, records = captured
    monkeypatch.delitem(LINES, "core.execution.failed")
    observe([recorded(FAILED)])
    (record,) = records
    assert (record.levelno, record.getMessage()) == (logging.DEBUG, "event recorded")
    fields = getattr(record, FIELDS_ATTRIBUTE)
    assert fields["kind"] == OTHER.kind and fields["execution"] == "w/2"
    assert "error_message" not in fields  # only the identifying fields


def test_levels_below_the_loggers_are_not_even_built(captured: Any) -> None:
    observe, records = captured
    observe.logger.setLevel(logging.WARNING)
    observe([recorded(InputAccepted(work_id="w", key="k")), recorded(FAILED)])
    assert [r.getMessage() for r in records] == ["attempt failed"]


# -- the formatters ------------------------------------------------------------------------


def _record(exc: BaseException | None = None, **fields: Any) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord(
        "rota.decisions", logging.WARNING, "f", 1, "attempt\nfailed", (), exc_info
    )
    setattr(record, FIELDS_ATTRIBUTE, fields)
    return record


def test_json_lines_are_one_object_with_time_level_logger_message_and_fields() -> None:
    line = JsonFormatter().format(_record(work="w", epoch=1, due_at=AT, delivery_id=None))
    assert "\n" not in line
    value = json.loads(line)
    assert value["level"] == "warning" and value["logger"] == "rota.decisions"
    assert value["message"] == "attempt failed"  # one line, whatever the message held
    assert value["due_at"] == "2026-12-01T12:00:00Z" and value["delivery_id"] is None
    assert datetime.fromisoformat(value["time"].replace("Z", "+00:00")).tzinfo is not None


def test_an_exception_is_shown_by_its_type_and_code_never_its_text() -> None:
    try:
        raise RotaError(f"failing with {CANARY}", code="store_unavailable")
    except RotaError as exc:
        caught = exc
    for formatter in (JsonFormatter(), TextFormatter()):
        line = formatter.format(_record(caught))
        assert CANARY not in line and "Traceback" not in line and "\n" not in line
        assert "RotaError" in line and "store_unavailable" in line


def test_text_lines_quote_values_that_would_split() -> None:
    line = TextFormatter().format(_record(work="a b", epoch=2, reason='said "x=1"', none=None))
    assert line.split(" ", 2)[1] == "WARNING"
    assert 'work="a b" epoch=2 reason="said \\"x=1\\"" none=-' in line
    assert line.count("\n") == 0


def test_settings_are_the_flag_then_the_environment_then_the_default() -> None:
    assert log_settings(environ={}) == LogSettings("text", "info", "default", "default")
    environ = {"ROTA_LOG_FORMAT": "JSON", "ROTA_LOG_LEVEL": "debug"}
    assert log_settings(environ=environ) == LogSettings(
        "json", "debug", "environment", "environment"
    )
    assert log_settings("text", "error", environ) == LogSettings("text", "error", "flag", "flag")
    with pytest.raises(RotaError) as refused:
        log_settings(environ={"ROTA_LOG_FORMAT": "xml"})
    assert refused.value.code == "usage" and "$ROTA_LOG_FORMAT" in str(refused.value)


def test_configured_writes_rotas_records_at_its_level_and_restores_the_logger() -> None:
    stream = io.StringIO()
    rota_logger = logging.getLogger("rota")
    before = rota_logger.level
    with configured(LogSettings("json", "warning"), stream):
        logging.getLogger("rota.decisions").info("hidden")
        logging.getLogger("rota.decisions").warning("shown")
        logging.getLogger("elsewhere").info("not ours")
    logging.getLogger("rota.decisions").warning("after")
    lines = [msgspec.json.decode(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["shown"]
    assert rota_logger.level == before


def test_the_operator_runbook_lists_every_line() -> None:
    runbook = (Path(__file__).parents[2] / "docs" / "operator.md").read_text()
    rows = [line for line in runbook.splitlines() if line.startswith("| ")]
    for tag, line in LINES.items():
        row = next((r for r in rows if f"| {line.message} |" in r), None)
        assert row is not None and tag in row and line.kind in row, (tag, line.message)
        for name in line.fields:
            assert name in row, (tag, name)
