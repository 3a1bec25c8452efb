"""Personal input fields, unit by unit: marking paths, sealing a payload, the AES-256-GCM
cipher (round trip, determinism, tamper), the key tables of memory, and what a reader gets
when the key is gone or the ciphertext was changed. No value or key reaches a message."""

from __future__ import annotations

import base64
import sys
from typing import Any

import msgspec
import pytest

from rota.application.errors import PortCode
from rota.application.personal import PersonalData, Unreadable, context
from rota.application.ports import NewEvent
from rota.application.transactions import Transactions
from rota.domain.errors import DomainCode, InvalidCommand, RotaError
from rota.domain.events.work import WorkForgotten, forgotten_identity
from rota.domain.failures import FailureCode
from rota.domain.personal import (
    MARKER,
    check_paths,
    has_markers,
    is_marker,
    open_fields,
    seal_fields,
    unsealed,
)
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.memory.backend import MemoryBackend
from rota.infrastructure.personal_cipher import AesGcmCipher
from rota.infrastructure.personal_keys import MemoryKeys, NoKeys, personal_keys_for

CANARY = "canary-4f1d9a@example.org"
KEY = bytes(range(32))


def _fake_seal(path: str, value: Any) -> str:
    return f"sealed:{path}"


# -- marking --------------------------------------------------------------------------------


def test_paths_are_dotted_keys_each_once() -> None:
    assert check_paths(["email", "address.street", "email"]) == ("email", "address.street")
    for bad in (["a..b"], [""], ["a b"], [3], ["x." * 8 + "x"]):
        with pytest.raises(InvalidCommand) as refused:
            check_paths(bad)
        assert refused.value.code == DomainCode.INVALID_PERSONAL
    with pytest.raises(InvalidCommand, match="list of dotted field paths"):
        check_paths("email")  # a lone string is not read as its characters
    with pytest.raises(InvalidCommand, match="at most 32"):
        check_paths([f"f{i}" for i in range(33)])


def test_sealing_replaces_marked_values_and_leaves_the_payload_given_as_it_was() -> None:
    payload = {"name": "Ada", "email": CANARY, "address": {"street": "1 Way", "city": "X"}}
    sealed = seal_fields(payload, ("email", "address.street", "phone"), _fake_seal)
    assert sealed == {
        "name": "Ada",
        "email": {MARKER: "sealed:email"},
        "address": {"street": {MARKER: "sealed:address.street"}, "city": "X"},
    }
    assert payload["email"] == CANARY and payload["address"]["street"] == "1 Way"
    assert is_marker(sealed["email"]) and has_markers(sealed) and not has_markers(payload)
    assert unsealed(payload, ("email", "phone")) == ["email"]
    assert unsealed(sealed, ("email", "address.street")) == []
    assert seal_fields(sealed, ("email",), _fake_seal) == sealed  # (never sealed twice)


def test_a_marked_path_absent_or_a_null_payload_is_fine() -> None:
    assert seal_fields({"a": 1}, ("email", "address.street"), _fake_seal) == {"a": 1}
    assert seal_fields(None, ("email",), _fake_seal) is None
    assert seal_fields({"email": None}, ("email",), _fake_seal) == {
        "email": {MARKER: "sealed:email"}
    }


@pytest.mark.parametrize("payload", [[CANARY], CANARY, 42, True])
def test_a_payload_that_is_not_an_object_is_refused_without_showing_it(payload: Any) -> None:
    with pytest.raises(InvalidCommand) as refused:
        seal_fields(payload, ("email",), _fake_seal)
    assert refused.value.code == DomainCode.INVALID_PERSONAL
    assert "not an object" in str(refused.value) and CANARY not in str(refused.value)


def test_a_path_through_a_value_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(InvalidCommand) as refused:
        seal_fields({"address": CANARY}, ("address.street",), _fake_seal)
    assert "address is a string, not an object" in str(refused.value)
    assert CANARY not in str(refused.value)


def test_opening_walks_every_marker_with_its_path() -> None:
    sealed = {"a": {MARKER: "t1"}, "b": {"c": {MARKER: "t2"}, "d": [1]}, "e": 5}
    opened = open_fields(sealed, lambda path, token: f"{path}={token}")
    assert opened == {"a": "a=t1", "b": {"c": "b.c=t2", "d": [1]}, "e": 5}
    plain = {"a": 1}
    assert open_fields(plain, lambda path, token: None) is plain


# -- the cipher -----------------------------------------------------------------------------


def test_the_cipher_round_trips_and_is_deterministic_per_key_and_context() -> None:
    cipher = AesGcmCipher()
    where = context("w1", "email")
    token = cipher.seal(KEY, where, CANARY.encode())
    assert CANARY not in token and CANARY.encode() not in base64.b64decode(token)
    assert cipher.open(KEY, where, token) == CANARY.encode()
    assert cipher.seal(KEY, where, CANARY.encode()) == token  # a retried submit: the same event
    assert cipher.seal(KEY, context("w2", "email"), CANARY.encode()) != token
    assert cipher.seal(KEY, where, b"other") != token
    assert cipher.seal(bytes(32), where, CANARY.encode()) != token


def test_a_changed_token_another_key_or_another_field_does_not_open() -> None:
    cipher = AesGcmCipher()
    where = context("w1", "email")
    token = cipher.seal(KEY, where, CANARY.encode())
    raw = bytearray(base64.b64decode(token))
    raw[-20] ^= 1
    changed = base64.b64encode(bytes(raw)).decode()
    for key, place, given in (
        (KEY, where, changed),
        (bytes(32), where, token),
        (KEY, context("w1", "phone"), token),  # a value moved to another field
        (KEY, context("w2", "email"), token),  # or to another Work
        (KEY, where, "not base64!"),
        (KEY, where, token[:8]),
    ):
        with pytest.raises(ValueError) as failed:
            cipher.open(key, place, given)
        assert CANARY not in str(failed.value) and KEY.hex() not in str(failed.value)


def test_without_cryptography_sealing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(RotaError) as missing:
        AesGcmCipher()
    assert missing.value.code == PortCode.PERSONAL_UNAVAILABLE
    assert "pip install 'rota[signing]'" in str(missing.value)


# -- sealing, opening, keys -----------------------------------------------------------------


@pytest.fixture
def personal() -> PersonalData:
    store = MemoryBackend(f"memory://personal-{id(object())}").open_log(clock=ManualClock())
    keys = personal_keys_for(store)
    assert isinstance(keys, MemoryKeys)
    return PersonalData(
        keys,
        AesGcmCipher,
        Transactions(store),
        binding_paths=lambda b: ("address.street",) if b == "b" else (),
    )


def test_a_submit_is_sealed_under_the_works_key_and_opened_for_the_job(
    personal: PersonalData,
) -> None:
    given = {"email": CANARY, "address": {"street": "1 Way"}, "n": 1}
    command = SubmitWork(
        work_id="w1", binding="b", inputs=(WorkInput(given, None, None, ("email",)),)
    )
    sealed = personal.seal(command)
    stored = sealed.inputs[0]
    assert stored.personal == () and stored.key is None  # (derived from the sealed form)
    assert CANARY not in msgspec.json.encode(stored.payload).decode()
    assert is_marker(stored.payload["address"]["street"])  # the binding's path, in union
    assert personal.seal(command) == sealed  # deterministic: the same command, the same event
    key = personal.keys.get("w1")
    assert key is not None and len(key) == 32
    assert personal.open_inputs("w1", [stored.payload, None]) == [given, None]
    unmarked = SubmitWork(work_id="w2", binding="other", inputs=(WorkInput({"a": 1}),))
    assert personal.seal(unmarked) is unmarked and personal.keys.get("w2") is None
    absent = SubmitWork(work_id="w3", binding="b", inputs=(WorkInput({"a": 1}),))
    assert personal.seal(absent).inputs == absent.inputs  # nothing marked is there:
    assert personal.keys.get("w3") is None  # no key is made


def test_a_forgotten_key_or_a_changed_ciphertext_is_unreadable_without_showing_it(
    personal: PersonalData,
) -> None:
    stored = personal.seal_input("w1", WorkInput({"email": CANARY}, None, None, ("email",)))
    token = stored.payload["email"][MARKER]
    changed = {"email": {MARKER: ("A" if token[0] != "A" else "B") + token[1:]}}
    with pytest.raises(Unreadable) as failed:
        personal.open_inputs("w1", [changed])
    assert failed.value.code == FailureCode.INPUT_UNREADABLE
    assert failed.value.result().permanent
    key = personal.keys.get("w1")
    assert key is not None
    assert personal.keys.destroy("w1") and not personal.keys.destroy("w1")
    # No key and no forget recorded: nothing of this Work was sealed (an import brings no
    # keys; a user's own data may look like a marker): the payload is given as stored.
    assert personal.open_inputs("w1", [stored.payload]) == [stored.payload]
    forgotten_event = WorkForgotten(work_id="w1", by="test")
    personal.store.append([NewEvent("personal/w1", forgotten_event, forgotten_identity("w1"))])
    with pytest.raises(Unreadable) as forgotten:
        personal.open_inputs("w1", [stored.payload])
    assert forgotten.value.code == FailureCode.INPUT_FORGOTTEN
    for error in (failed.value, forgotten.value):
        assert CANARY not in str(error) and key.hex() not in str(error)


def test_personal_fields_with_debounce_or_a_foreign_store_are_refused(
    personal: PersonalData,
) -> None:
    from rota.domain.events.work import Debounce

    command = SubmitWork(
        work_id="w1",
        binding="x",
        inputs=(WorkInput({"email": CANARY}, None, None, ("email",)),),
        debounce=Debounce("k", 1.0),
    )
    with pytest.raises(InvalidCommand) as refused:
        personal.seal(command)
    assert refused.value.code == DomainCode.INVALID_PERSONAL
    foreign = NoKeys(personal.store)
    assert foreign.get("w1") is None and not foreign.destroy("w1")
    with pytest.raises(RotaError) as none:
        foreign.create("w1")
    assert none.value.code == PortCode.PERSONAL_UNAVAILABLE
