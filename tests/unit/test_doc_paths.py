"""The module paths the architecture page and the feature docs' code maps name exist.

`docs/architecture.md` walks one transition file by file, and each feature doc ends with a
"## Code map" listing its modules per layer; a module moved or renamed without them fails
here. A path with a slash (`application/commands/lifecycle.py`, `rota/http/web/`) must exist
from the repository root; a bare module name (`evolve.py`) must name some product module.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("rota", "domain", "projections", "application", "infrastructure", "replay")
# Feature docs that end with a code map.
CODE_MAPS = [
    "schedules.md",
    "replay.md",
    "storage.md",
    "postgresql.md",
    "auditor.md",
    "runbook-corruption.md",
    "http.md",
    "web.md",
    "guide.md",
    "operator.md",
]
NAMED = re.compile(r"`([A-Za-z_][\w/.-]*?(?:\.py|\.sql|/))`")


def _product_names() -> set[str]:
    return {p.name for folder in PRODUCT for p in (ROOT / folder).rglob("*.py")} | {
        p.name for folder in PRODUCT for p in (ROOT / folder).rglob("*.sql")
    }


def _missing(text: str) -> list[str]:
    names = _product_names()
    missing = []
    for path in NAMED.findall(text):
        if path.startswith(("tests/", "bench/", "docs/")) or path in ("setup.py",):
            found = (ROOT / path).exists()
        elif "/" in path.rstrip("/"):
            found = (ROOT / path).exists() or _under_a_layer(path)
        elif path.endswith("/"):
            found = any((ROOT / folder / path).is_dir() for folder in ("", *PRODUCT))
            found = found or any(p.is_dir() for f in PRODUCT for p in (ROOT / f).rglob(path[:-1]))
        else:
            found = path in names
        if not found:
            missing.append(path)
    return missing


def _under_a_layer(path: str) -> bool:
    """`sqlite/store.py` in a paragraph about infrastructure/: some layer holds it."""
    return any((ROOT / folder / path).exists() for folder in PRODUCT) or any(
        (ROOT / folder / sub / path).exists()
        for folder in PRODUCT
        for sub in ("http", "embedded", "cli", "commands", "queries", "ports")
    )


def test_the_architecture_page_names_only_modules_that_exist() -> None:
    assert _missing((ROOT / "docs" / "architecture.md").read_text()) == []


def test_every_feature_doc_ends_with_a_code_map_of_modules_that_exist() -> None:
    problems = {}
    for name in CODE_MAPS:
        text = (ROOT / "docs" / name).read_text()
        headings = re.findall(r"^## .*$", text, re.MULTILINE)
        if not headings or headings[-1] != "## Code map":
            problems[name] = f"last section is {headings[-1:]!r}, not '## Code map'"
            continue
        code_map = text[text.rindex("## Code map") :]
        if not NAMED.search(code_map):
            problems[name] = "the code map names no module"
        elif missing := _missing(code_map):
            problems[name] = f"names modules that do not exist: {missing}"
    assert problems == {}


def test_the_check_finds_a_renamed_module() -> None:
    assert _missing("`application/lifecycle.py` and `domain/schedules.py`") == [
        "application/lifecycle.py",
        "domain/schedules.py",
    ]
    assert _missing("`application/commands/lifecycle.py`, `evolve.py`, `rota/http/web/`") == []
