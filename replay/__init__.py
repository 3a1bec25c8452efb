"""Replay: verify the log's hash chain, rebuild projections, travel to past moments.

`state_at` and `verify` are importable from here (`rota.replay.state_at(store,
position=N)`); they load on first use, so importing a submodule (`rota.replay.progress`)
stays cheap. `rota.replay.explain.explain` and `rota.replay.rebuild.rebuild` live in the
submodules of their names.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "state_at": "timetravel",
    "position_at": "timetravel",
    "verify": "rebuild",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rota.replay' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rota.replay.{module}"), name)


__all__ = ["position_at", "state_at", "verify"]
