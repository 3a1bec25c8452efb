"""The personal data key table (`PersonalKeys`) against every store: no table until the first
key; a key is 32 random bytes, one per Work, the same to every handle and to racing
creators; destroy removes it for every handle, once, and bars a new one; a store's log is
not touched."""

from __future__ import annotations

import threading

from rota.application.ports import EventStore, PersonalKeys
from rota.infrastructure.personal_keys import personal_keys_for

from .conftest import OpenStore


def test_keys_are_per_work_shared_by_handles_and_destroyed_once(
    store: EventStore, open_store: OpenStore
) -> None:
    keys = personal_keys_for(store)
    assert keys.get("w1") is None  # (no table yet: nothing)
    head = store.head()
    first = keys.create("w1")
    assert len(first) == 32 and keys.create("w1") == first
    other = keys.create("w2")
    assert other != first
    elsewhere = personal_keys_for(open_store())  # another handle (connection) on the log
    assert elsewhere.get("w1") == first
    assert elsewhere.destroy("w1") and not keys.destroy("w1")
    assert keys.get("w1") is None and keys.get("w2") == other
    assert keys.create("w1") is None  # a destroyed key is never replaced
    assert not keys.destroy("never") and keys.create("never") is None  # (barred beforehand)
    assert store.head() == head  # the key table is beside the log, not in it


def test_racing_creators_of_one_works_key_get_the_same_key(
    store: EventStore, open_store: OpenStore
) -> None:
    handles = [personal_keys_for(open_store()) for _ in range(4)]
    got: list[bytes] = []
    start = threading.Barrier(len(handles))

    def create(keys: PersonalKeys) -> None:
        start.wait()
        got.append(keys.create("raced"))

    threads = [threading.Thread(target=create, args=(keys,)) for keys in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == 4 and len(set(got)) == 1
    assert personal_keys_for(store).get("raced") == got[0]


def test_a_create_racing_a_destroy_never_leaves_a_key_after_it(
    store: EventStore, open_store: OpenStore
) -> None:
    creator, destroyer = personal_keys_for(open_store()), personal_keys_for(open_store())
    for n in range(20):
        work = f"race-{n}"
        start = threading.Barrier(2)

        def create(work: str = work, start: threading.Barrier = start) -> None:
            start.wait()
            creator.create(work)

        thread = threading.Thread(target=create)
        thread.start()
        start.wait()
        destroyer.destroy(work)
        thread.join(30)
        assert personal_keys_for(store).get(work) is None  # whichever came first
        assert creator.create(work) is None
