"""What a reader sees of an event (`events()`, `rota log`, the HTTP API) has every field,
those a stored version leaves out at their defaults too."""

from datetime import UTC, datetime

import msgspec

from rota.application.queries.work_views import event_data


class Inner(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str
    payload: object = None


class Lean(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="test.lean"):
    work_id: str
    kind: str = "run-once"
    grants: list[str] = msgspec.field(default_factory=list)
    inner: Inner | None = None
    at: datetime | None = None


def test_fields_left_out_of_the_stored_json_are_shown_at_their_defaults() -> None:
    event = Lean(work_id="w", inner=Inner(key="k"))
    stored = {"type": "test.lean", "work_id": "w", "inner": {"key": "k"}}
    assert msgspec.to_builtins(event) == stored
    assert event_data(event) == {
        "type": "test.lean",
        "work_id": "w",
        "kind": "run-once",
        "grants": [],
        "inner": {"key": "k", "payload": None},
        "at": None,
    }
    assert list(event_data(event)) == ["type", "work_id", "kind", "grants", "inner", "at"]


def test_values_convert_as_to_builtins_converts_them() -> None:
    at = datetime(2026, 12, 8, 1, 2, 3, tzinfo=UTC)
    event = Lean(work_id="w", grants=["a"], at=at, inner=Inner(key="k", payload={"n": [1, 2]}))
    assert event_data(event) == msgspec.to_builtins(
        Lean(work_id="w", grants=["a"], at=at, inner=Inner(key="k", payload={"n": [1, 2]}))
    ) | {"kind": "run-once"}
