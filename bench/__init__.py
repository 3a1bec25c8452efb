"""Benchmarks of rota's event store: `python -m bench.append` and `python -m bench.read`.

Not part of the installed package. Run from the repository root, `python -m` puts the root
first on `sys.path`, where the `rota/` folder (only the top of the package: the strict
editable install maps the layer folders into it) would shadow the installed `rota` and fail
with "No module named 'rota.domain'". So the installed package is imported once here, with
the root left off the path; every later `rota.*` import then resolves through it.
"""

import sys
from pathlib import Path


def _use_installed_rota() -> None:
    if "rota" in sys.modules:
        return
    root = Path(__file__).resolve().parent.parent
    saved = list(sys.path)
    sys.path[:] = [entry for entry in saved if Path(entry or ".").resolve() != root]
    try:
        import rota  # noqa: F401
    finally:
        sys.path[:] = saved


_use_installed_rota()
