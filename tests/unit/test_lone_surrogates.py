"""A lone surrogate (`"\\ud800"`: JSON can escape it, UTF-8 cannot encode it) anywhere in a
payload is a `not_json` refusal naming its path, in `submit(input=...)` and `accept`, not
an encoder's UnicodeEncodeError."""

from __future__ import annotations

from typing import Any

import pytest

import rota
from rota.domain.errors import DomainCode, RotaError
from rota.domain.results import check_payload, check_unicode

BAD: list[tuple[Any, str]] = [
    ("\ud800", "input payload:"),
    ({"text": "ok \udfff"}, "input payload.text:"),
    ([1, {"deep": ["\udc00x"]}], "input payload[1].deep[0]:"),
    ({"key \ud800": 1}, "input payload:"),
]


@pytest.mark.parametrize(("value", "where"), BAD)
def test_a_lone_surrogate_in_a_payload_is_not_json_with_its_path(value: Any, where: str) -> None:
    with pytest.raises(RotaError) as caught:
        check_payload(value, "input payload")
    assert caught.value.code == DomainCode.NOT_JSON
    assert str(caught.value).startswith(where)
    assert "lone surrogate" in str(caught.value)


def test_a_surrogate_pair_decoded_is_one_character_and_kept() -> None:
    check_unicode({"smile": "\U0001f600"}, "input payload")
    assert check_payload({"smile": "\U0001f600"}, "input payload") is not None


def test_submit_and_accept_refuse_a_lone_surrogate_with_a_code() -> None:
    with rota.open("memory://lone-surrogates") as scheduler:
        scheduler.register("job", lambda ctx: None)
        with pytest.raises(RotaError) as caught:
            scheduler.submit("w1", binding="job", input={"name": "\ud800"})
        assert caught.value.code == DomainCode.NOT_JSON
        scheduler.submit("w2", binding="job", input={"name": "fine"}, trigger="all")
        with pytest.raises(RotaError) as caught:
            scheduler.accept("w2", ["\udfff"], key="k2")
        assert caught.value.code == DomainCode.NOT_JSON
