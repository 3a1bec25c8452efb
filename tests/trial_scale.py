"""How hard the suite's randomized and timed trials push.

`make test` runs them at suite scale, sized to keep the whole suite under ten minutes on two
cores; `make soak` sets `ROTA_SOAK=1` and runs them at the scale of the reliability matrix
(../shared/notes/reliability.md: 200 crash trials, 500 clock-jump sequences, 1,000 fuzz
examples per parser). A named environment variable (`ROTA_CRASH_TRIALS=...`) overrides both.
"""

from __future__ import annotations

import os

SOAK = os.environ.get("ROTA_SOAK", "") == "1"


def scale(suite: int, soak: int, env: str | None = None) -> int:
    """`suite` under make test, `soak` under make soak, or the value of `env` if it is set."""
    if env is not None and os.environ.get(env):
        return int(os.environ[env])
    return soak if SOAK else suite


def seconds(suite: float, soak: float, env: str | None = None) -> float:
    """`scale` for a duration in seconds."""
    if env is not None and os.environ.get(env):
        return float(os.environ[env])
    return soak if SOAK else suite
