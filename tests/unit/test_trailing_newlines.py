"""Ids, names and keys with a trailing newline are refused: every validator matches the
whole string (`fullmatch`), where `match` with `$` let "name\\n" through (`$` matches
before a final newline)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
