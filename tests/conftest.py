"""Shared fixtures. Randomized tests print their seed; set ROTA_SEED to reproduce one."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator

import pytest

from rota.infrastructure.memory.backend import forget


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> Iterator[int]:
    value = int(os.environ.get("ROTA_SEED", random.randrange(2**32)))
    print(f"\n[{request.node.nodeid}] ROTA_SEED={value}")
    yield value


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh in-memory store of this test's own, `memory://<unique name>`: every handle
    that opens it (`rota.open`, `open_store`) shares its log and projections; forgotten
    after the test. For tests of the application layer that need a store, not a backend."""
    name = f"test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    forget(name)
