"""Layering rules, checked on the source: domain/ is pure and self-contained."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_DOMAIN_IMPORTS = {"msgspec"}
FORBIDDEN_IN_DOMAIN = {"time", "os", "socket", "random", "subprocess", "threading", "io", "sqlite3"}
LAYER_IMPORTS = {
    "domain": set(),
    "projections": {"rota.domain"},
}


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
    return found


def test_domain_imports_only_the_standard_library_msgspec_and_itself() -> None:
    problems = []
    for path in sorted((ROOT / "domain").rglob("*.py")):
        for module, line in _imports(path):
            top = module.split(".")[0]
            if module.startswith("rota.domain") or top == "__future__":
                continue
            if top in ALLOWED_DOMAIN_IMPORTS:
                continue
            if top in sys.stdlib_module_names and top not in FORBIDDEN_IN_DOMAIN:
                continue
            problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not problems, "domain/ must stay pure:\n" + "\n".join(problems)


def test_domain_reads_no_clock() -> None:
    problems = []
    for path in sorted((ROOT / "domain").rglob("*.py")):
        text = path.read_text()
        for needle in ("datetime.now(", ".utcnow(", "date.today(", "time.time("):
            if needle in text:
                problems.append(f"{path.relative_to(ROOT)} calls {needle}")
    assert not problems, problems


def test_projections_import_only_the_domain() -> None:
    problems = []
    for path in sorted((ROOT / "projections").rglob("*.py")):
        for module, line in _imports(path):
            if module.startswith("rota.") and not module.startswith(
                ("rota.domain", "rota.projections")
            ):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not problems, problems


def test_no_module_imports_a_layer_folder_by_its_folder_name() -> None:
    problems = []
    for folder in ("rota", "domain", "projections", "infrastructure", "replay", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module, line in _imports(path):
                if module.split(".")[0] in {"domain", "projections", "infrastructure", "replay"}:
                    problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not problems, "import rota.<layer>, never the bare folder:\n" + "\n".join(problems)
