"""`fewer_collections()` raises the collector's generation-0 threshold for a batch only."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rota.application.collection import BATCH_THRESHOLD, fewer_collections


@pytest.fixture(autouse=True)
def _collector() -> Iterator[None]:
    """Each test starts from Python's defaults and leaves the collector as it found it."""
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_the_threshold_is_raised_for_the_block_and_restored_after() -> None:
    with fewer_collections():
        assert gc.get_threshold() == (BATCH_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_it_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_nested_or_concurrent_batch_leaves_the_raise_to_the_first() -> None:
    with fewer_collections():
        with fewer_collections():
            assert gc.get_threshold()[0] == BATCH_THRESHOLD
        assert gc.get_threshold()[0] == BATCH_THRESHOLD  # the inner one did not restore
    assert gc.get_threshold()[0] == 700


def test_a_higher_threshold_or_a_disabled_collector_is_left_alone() -> None:
    gc.set_threshold(50_000, 10, 10)
    with fewer_collections():
        assert gc.get_threshold()[0] == 50_000
    gc.set_threshold(700, 10, 10)
    gc.disable()
    with fewer_collections():
        assert gc.get_threshold()[0] == 700 and not gc.isenabled()


def test_a_threshold_changed_during_the_block_is_kept() -> None:
    with fewer_collections():
        gc.set_threshold(2_000, 5, 5)  # the application tunes the collector meanwhile
    assert gc.get_threshold() == (2_000, 5, 5)


def test_the_collector_still_runs_during_a_batch() -> None:
    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(phase))
    try:
        with fewer_collections(threshold=1_000):
            garbage = [[] for _ in range(5_000)]  # tracked containers: five collections due
            del garbage
    finally:
        gc.callbacks.pop()
    assert collections.count("start") >= 1
