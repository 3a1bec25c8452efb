"""Layering rules, checked on the source (see docs/architecture.md).

Dependencies point inward: domain <- projections <- the ports (`rota.application.ports`)
<- application <- infrastructure <- replay <- the facade and composition root (`rota`) <-
the command line (`rota.cli`). A layer imports only itself and the layers inside it, so no
two layers import each other; every import counts, including those inside functions and
under TYPE_CHECKING. The ports are a lean layer of their own: they import only the domain,
the standard library and msgspec. No product module is over 450 lines.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# cronsim: cron arithmetic on the datetimes it is given (it reads no clock; seed 003 schedules).
ALLOWED_DOMAIN_IMPORTS = {"msgspec", "cronsim"}
FORBIDDEN_IN_DOMAIN = {"time", "os", "socket", "random", "subprocess", "threading", "io", "sqlite3"}
# Drivers and process or network I/O belong to adapters, never to the inner layers.
ADAPTER_ONLY = {"apsw", "psycopg", "psycopg_pool", "sqlite3", "socket", "subprocess", "http"}
# Layer packages, innermost first; a module belongs to the longest package naming it.
LAYERS = [
    "rota.domain",
    "rota.projections",
    "rota.application.ports",
    "rota.application",
    "rota.infrastructure",
    "rota.replay",
    "rota",
    "rota.cli",
]
FOLDERS = {
    "rota.domain": "domain",
    "rota.projections": "projections",
    "rota.application": "application",
    "rota.infrastructure": "infrastructure",
    "rota.replay": "replay",
    "rota": "rota",
}
ENTRY_MODULES = {"rota.__main__": "rota.cli"}  # `python -m rota` is the command line
# What the ports may import besides themselves and the domain: contracts, not helpers.
ALLOWED_PORTS_IMPORTS = {"msgspec"}
MAX_MODULE_LINES = 450
BACKENDS = ["sqlite", "postgres", "memory", "eventsourcing", "executors"]


def _module_name(path: Path) -> str:
    folder = path.relative_to(ROOT).parts[0]
    package = next(p for p, f in FOLDERS.items() if f == folder)
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _layer(module: str) -> str:
    if module in ENTRY_MODULES:
        return ENTRY_MODULES[module]
    return max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
            if node.module == "rota":  # `from rota import bootstrap` names a module
                found.extend((f"rota.{a.name}", node.lineno) for a in node.names)
    return found


def _product_modules() -> list[tuple[str, Path]]:
    modules = []
    for folder in FOLDERS.values():
        for path in sorted((ROOT / folder).rglob("*.py")):
            modules.append((_module_name(path), path))
    return modules


def _rota_imports() -> list[tuple[str, str, Path, int]]:
    """(importer, imported) for every import of a rota module by a product module."""
    found = []
    for name, path in _product_modules():
        for module, line in _imports(path):
            if module == "rota" or module.startswith("rota."):
                found.append((name, module, path, line))
    return found


def test_every_import_points_inward() -> None:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    problems = []
    for importer, imported, path, line in _rota_imports():
        source, target = _layer(importer), _layer(imported)
        if rank[target] > rank[source]:
            where = f"{path.relative_to(ROOT)}:{line}"
            problems.append(f"{where}: {source} imports {imported} ({target} is outside it)")
    assert not problems, "imports must point inward:\n" + "\n".join(problems)


def test_no_two_layers_import_each_other() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for importer, imported, _, _ in _rota_imports():
        source, target = _layer(importer), _layer(imported)
        if source != target:
            edges[source].add(target)
    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, set()))
    assert not cycles, cycles


def test_backend_packages_do_not_import_each_other_in_a_cycle() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for importer, imported, _, _ in _rota_imports():
        a = _backend(importer)
        b = _backend(imported)
        if a and b and a != b:
            edges[a].add(b)
    cycles = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, set()))
    assert not cycles, cycles


def _backend(module: str) -> str | None:
    for backend in BACKENDS:
        package = f"rota.infrastructure.{backend}"
        if module == package or module.startswith(package + "."):
            return backend
    return None


def test_the_inner_layers_use_no_driver_and_no_process_or_network_io() -> None:
    problems = []
    for name, path in _product_modules():
        inner = ("rota.domain", "rota.projections", "rota.application.ports", "rota.application")
        if _layer(name) not in inner:
            continue
        for module, line in _imports(path):
            if module.split(".")[0] in ADAPTER_ONLY:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not problems, problems


def test_only_the_composition_root_builds_a_service_or_a_host() -> None:
    builders = set()
    for name, path in _product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            if called and node.func.id in ("SchedulerService", "Host"):  # type: ignore[attr-defined]
                builders.add(name)
    assert builders == {"rota.bootstrap"}, builders


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


def _foreign_imports(imports: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The imports a ports module may not make: anything but the ports themselves, the
    domain, the standard library and msgspec."""
    foreign = []
    for module, line in imports:
        top = module.split(".")[0]
        if module.startswith(("rota.application.ports", "rota.domain")):
            continue
        if top == "__future__" or top in ALLOWED_PORTS_IMPORTS:
            continue
        if top in sys.stdlib_module_names and top not in ADAPTER_ONLY:
            continue
        foreign.append((module, line))
    return foreign


def test_the_ports_import_only_the_domain_the_standard_library_and_msgspec() -> None:
    ports = sorted((ROOT / "application" / "ports").rglob("*.py"))
    assert len(ports) > 1, "the ports are a package of modules"
    problems = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in ports
        for module, line in _foreign_imports(_imports(path))
    ]
    assert not problems, "the ports are contracts only:\n" + "\n".join(problems)


def test_the_ports_rule_catches_a_helper_or_a_projection() -> None:
    """Negative control: what the ports imported before they became a lean package."""
    imports = [
        ("rota.application.timestamps", 1),
        ("rota.projections.scheduler", 2),
        ("rota.infrastructure.codec", 3),
        ("sqlite3", 4),
        ("rota.domain.events", 5),
        ("rota.application.ports.records", 6),
        ("msgspec", 7),
        ("threading", 8),
    ]
    assert [line for _, line in _foreign_imports(imports)] == [1, 2, 3, 4]


def test_no_product_module_is_over_450_lines() -> None:
    oversized = []
    for _, path in _product_modules():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            oversized.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not oversized, f"split along a real seam (over {MAX_MODULE_LINES}): {oversized}"


def test_no_module_imports_a_layer_folder_by_its_folder_name() -> None:
    problems = []
    folders = ("rota", "domain", "projections", "application", "infrastructure", "replay", "bench")
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module, line in _imports(path):
                if module.split(".")[0] in {
                    "domain",
                    "projections",
                    "application",
                    "infrastructure",
                    "replay",
                }:
                    problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not problems, "import rota.<layer>, never the bare folder:\n" + "\n".join(problems)


def test_the_layer_rules_catch_an_outward_import(tmp_path: Path) -> None:
    """Negative control: the rank rule flags a domain module importing the application."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    assert rank[_layer("rota.application.ports")] > rank[_layer("rota.domain.events")]
    assert _layer("rota.application.ports.records") == "rota.application.ports"
    assert rank[_layer("rota.application.timestamps")] > rank[_layer("rota.application.ports")]
    assert rank[_layer("rota.application.ports")] > rank[_layer("rota.projections.scheduler")]
    assert _layer("rota.__main__") == "rota.cli"
    assert _layer("rota.infrastructure.sqlite.store") == "rota.infrastructure"
    assert _layer("rota.bootstrap") == "rota"
