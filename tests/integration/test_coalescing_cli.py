"""`rota submit --debounce KEY:WAIT[:MAX]` and `--unique KEY[:forever]` (a subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rota.cli.coalescing_options import parse_debounce
from rota.domain.errors import InvalidCommand
from rota.domain.events.work import Debounce

from .test_cli import CONFIG, ok, rota


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "rota.toml").write_text(CONFIG)
    return tmp_path


def test_debounced_and_unique_submits_say_which_work_took_them(home: Path) -> None:
    first = ok(home, "submit", "p1", "--binding", "ok", "--input", "1", "--debounce", "repo:a:60")
    assert first.startswith("p1: submitted, ready")
    second = ok(home, "submit", "p2", "--binding", "ok", "--input", "2", "--debounce", "repo:a:60")
    assert second.startswith("p1: took the submit of p2, ready") and "2 pending input" in second
    ok(home, "submit", "u1", "--binding", "ok", "--unique", "report:daily:forever")
    view = json.loads(
        ok(home, "submit", "u2", "--binding", "ok", "--unique", "report:daily", "--json")
    )
    assert view["id"] == "u1"
    events = json.loads(ok(home, "events", "--json"))
    kinds = [e["type"] for e in events]
    assert kinds.count("core.submit.merged") == 1 and kinds.count("core.submit.suppressed") == 1


def test_a_malformed_debounce_is_refused(home: Path) -> None:
    done = rota(home, "submit", "p", "--binding", "ok", "--debounce", "repo:a:soon")
    assert done.returncode != 0 and "invalid_flow" in done.stderr


def test_the_last_two_numbers_are_wait_and_max() -> None:
    assert parse_debounce("repo:acme:30:300") == Debounce("repo:acme", 30.0, 300.0)
    assert parse_debounce("repo:acme:30") == Debounce("repo:acme", 30.0)
    assert parse_debounce("k:0.5") == Debounce("k", 0.5)
    with pytest.raises(InvalidCommand):
        parse_debounce("30")
