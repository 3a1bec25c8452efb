"""Ids, names and keys with a trailing newline are refused: every validator matches the
whole string (`fullmatch`), where `match` with `$` let "name\\n" through (`$` matches
before a final newline)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.domain.errors import DomainCode, RotaError


@pytest.fixture
def scheduler() -> Iterator[rota.Scheduler]:
    with rota.open("memory://trailing-newlines") as opened:
        opened.register("job", lambda ctx: None)
        yield opened


CASES: list[tuple[str, Callable[[rota.Scheduler], Any], str]] = [
    ("work id", lambda s: s.submit("w1\n", binding="job"), DomainCode.INVALID_WORK_ID),
    ("binding name", lambda s: s.submit("w1", binding="job\n"), DomainCode.INVALID_WORK),
    (
        "registered binding",
        lambda s: s.register("other\n", lambda ctx: None),
        DomainCode.INVALID_CONFIG,
    ),
    ("bound binding", lambda s: s.bind("other\n", executor="job"), DomainCode.INVALID_CONFIG),
    (
        "schedule name",
        lambda s: s.schedule("tick\n", binding="job", every="1h"),
        DomainCode.INVALID_SCHEDULE,
    ),
    (
        "input key",
        lambda s: s.submit("w1", binding="job", input=1, input_key="k1\n"),
        DomainCode.INVALID_KEY,
    ),
    ("scope", lambda s: s.submit("w1", binding="job", scope="root/a\n"), DomainCode.INVALID_SCOPE),
    (
        "correlation key",
        lambda s: s.submit("w1", binding="job", input=1, correlation_key="order-1\n"),
        DomainCode.INVALID_KEY,
    ),
]


@pytest.mark.parametrize(("what", "act", "code"), CASES, ids=[c[0] for c in CASES])
def test_a_trailing_newline_is_refused(
    scheduler: rota.Scheduler, what: str, act: Callable[[rota.Scheduler], Any], code: str
) -> None:
    head = scheduler.store.head()
    with pytest.raises(RotaError) as caught:
        act(scheduler)
    assert caught.value.code == code, (what, caught.value)
    assert scheduler.store.head() == head


def test_an_accepted_input_key_with_a_trailing_newline_is_refused(
    scheduler: rota.Scheduler,
) -> None:
    scheduler.submit("w2", binding="job", input=1, input_key="k1")
    with pytest.raises(RotaError) as caught:
        scheduler.accept("w2", 2, key="k2\n")
    assert caught.value.code == DomainCode.INVALID_KEY


@pytest.mark.parametrize("bad", ["", "x" * 201, "a b", "order\n", "ü", 7])
def test_a_correlation_key_has_the_shape_of_an_input_key(
    scheduler: rota.Scheduler, bad: Any
) -> None:
    scheduler.submit("w3", binding="job", input=1, correlation_key="order:1/a@b.c_d-e")
    head = scheduler.store.head()
    with pytest.raises(RotaError) as caught:
        scheduler.accept("w3", 2, correlation_key=bad)
    assert caught.value.code == DomainCode.INVALID_KEY
    assert "correlation key" in str(caught.value)
    assert scheduler.store.head() == head


def test_a_checkpoint_with_a_trailing_newline_is_not_taken(tmp_path: Path) -> None:
    from rota.replay import checkpoint as checkpoints

    def write(name: str, head_hash: str) -> Path:
        body = {"store_id": "s1", "position": 1, "head_hash": head_hash,
                "written_at": "2026-12-07T00:00:00Z"}  # fmt: skip
        (tmp_path / name).write_text(json.dumps(body))
        return tmp_path / name

    good = write("checkpoint-000000000001-s1.json", "0" * 64)
    write("checkpoint-000000000002-s1.json\n", "0" * 64)  # a name `match` with `$` took
    assert checkpoints.paths(tmp_path) == [good]
    bad = write("checkpoint-000000000001-s2.json", "0" * 64 + "\n")
    with pytest.raises(RotaError, match="head_hash is not 64 lowercase hex digits"):
        checkpoints.load(bad)


def test_a_postgresql_schema_name_with_a_trailing_newline_is_refused() -> None:
    from rota.infrastructure.postgres.names import identifier

    assert identifier("rota_1") == "rota_1"
    with pytest.raises(RotaError) as caught:
        identifier("rota\n")
    assert caught.value.code == "invalid_identifier"
