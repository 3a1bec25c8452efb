"""Given a Work, when input or a result holds a value JSON cannot hold exactly, then it is
refused with the bad value's path and no event (issue 15 item 6)."""

from __future__ import annotations

from datetime import UTC, datetime

from rota.domain import control as ct
from rota.domain import lifecycle as lc
from rota.domain.results import Result

from .test_control import running
from .test_lifecycle import story_with_input


def test_an_inject_with_a_non_string_key_is_refused_before_its_key_is_derived() -> None:
    story = running()
    refusal = story.refused(
        lambda w: ct.request_inject(w, work_id="w", payload={"n": {1: "one"}}), "not_json"
    )
    assert str(refusal).startswith("input payload.n: the key 1 is not a string")


def test_an_input_with_nan_is_refused_not_stored_as_null() -> None:
    story = story_with_input()
    refusal = story.refused(
        lambda w: lc.accept_input(w, work_id="w", payload=[0, float("nan")]), "not_json"
    )
    assert str(refusal).startswith("input payload[1]: nan is not a JSON number")


def test_a_finish_with_a_datetime_in_its_data_is_refused() -> None:
    story = running()
    when = datetime(2026, 1, 1, tzinfo=UTC)
    refusal = story.refused(
        lambda w: lc.finish(w, 1, 1, story.now, Result(data={"at": when})), "not_json"
    )
    assert str(refusal).startswith("result data.at: a datetime is not a JSON value")
