"""docs/events.md documents every event type, and is exactly what the types generate."""

from __future__ import annotations

from pathlib import Path

from rota.domain.events import ALL_EVENTS
from rota.infrastructure.catalogue import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def test_catalogue_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/events.md is stale: run `python -P -m rota.infrastructure.catalogue > docs/events.md`"
    )


def test_every_event_type_is_documented_with_its_stream() -> None:
    text = DOC.read_text()
    for event_type in ALL_EVENTS:
        assert f"## `{event_type.tag()}`" in text
        assert event_type.__doc__, f"{event_type.__name__} needs a docstring"
        assert event_type.stream_pattern, f"{event_type.__name__} needs a stream_pattern"
