"""Shared fixtures. Randomized tests print their seed; set ROTA_SEED to reproduce one."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> Iterator[int]:
    value = int(os.environ.get("ROTA_SEED", random.randrange(2**32)))
    print(f"\n[{request.node.nodeid}] ROTA_SEED={value}")
    yield value
