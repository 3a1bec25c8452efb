"""Modules that exist only for speed say so: each opens its docstring with "Optimisation:
<what it saves> (bench <module>)", naming the `bench/` module whose figures justify it
(bench/RESULTS.md). The registry below lists them; a module that opens so must be in it,
so the list and the docstrings cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("rota", "domain", "projections", "application", "infrastructure", "replay")
OPENING = re.compile(r"Optimisation: \S.*? \(bench (?P<bench>[a-z_]+)\)\.?$", re.DOTALL)

# Every module of rota that exists only for speed (memory included), by path.
OPTIMISATIONS = [
    "application/collection.py",
    "application/group_commit.py",
    "application/launch_writes.py",
    "application/pass_sync.py",
    "application/ports/cancel_event.py",
    "application/tallies.py",
    "infrastructure/canonical.py",
    "infrastructure/executors/shell_binary.py",
    "infrastructure/executors/shell_launch.py",
    "infrastructure/merkle.py",
    "infrastructure/spill.py",
    "infrastructure/sqlite/projection_swap.py",
    "infrastructure/stored_works.py",
    "projections/work_tally.py",
    "replay/row_streams.py",
]


def _opening(path: Path) -> str:
    """The docstring's first paragraph, its lines joined."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _problem(path: Path) -> str | None:
    """Why `path` does not open as an optimisation module must, or None."""
    opening = _opening(path)
    found = OPENING.match(opening)
    if found is None:
        return f'does not open with "Optimisation: ... (bench <module>)": {opening[:80]!r}'
    bench = found["bench"]
    if not (ROOT / "bench" / f"{bench}.py").is_file():
        return f"names bench {bench!r}, which is not a module of bench/"
    return None


def test_each_optimisation_module_opens_by_saying_so_and_names_its_bench() -> None:
    problems = {name: _problem(ROOT / name) for name in OPTIMISATIONS}
    assert {name: problem for name, problem in problems.items() if problem} == {}


def test_every_module_opening_as_an_optimisation_is_in_the_registry() -> None:
    opening = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if _opening(path).startswith("Optimisation:"):
                opening.append(str(path.relative_to(ROOT)))
    assert sorted(opening) == sorted(OPTIMISATIONS)


def test_the_check_refuses_a_plain_docstring_and_an_unknown_bench(tmp_path: Path) -> None:
    """Negative control: what the check refuses."""
    plain = tmp_path / "plain.py"
    plain.write_text('"""Group commit of concurrent submits."""\n')
    unknown = tmp_path / "unknown.py"
    unknown.write_text('"""Optimisation: one fsync a pass (bench no_such_bench)."""\n')
    unnamed = tmp_path / "unnamed.py"
    unnamed.write_text('"""Optimisation: one fsync a pass."""\n')
    named = tmp_path / "named.py"
    named.write_text(
        '"""Optimisation: one fsync a pass,\nnot three (bench lifecycle).\n\nMore."""\n'
    )
    assert "does not open" in str(_problem(plain))
    assert "not a module of bench/" in str(_problem(unknown))
    assert "does not open" in str(_problem(unnamed))
    assert _problem(named) is None
