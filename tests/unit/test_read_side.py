"""The read side's one door: outside `rota.application`, no code reaches into the service's
state (`.lock`, `.projection`, `.transactions`) or the host's executor directory
(`host.directory`); it calls the queries of `rota.application.queries` and the commands of
the service (docs/architecture.md, the layers: application/queries/).

The check is on the source (AST): an attribute `lock`, `projection`, `transactions`,
`configuration` or `last_waiting` (the last start pass's) read from an expression that names a
service, a host or the schedule commands (`service`, `self.service`, `scheduler.service`,
`service.schedules`, `self.commands` ...), any `.transactions`, and `directory` read from a
host.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every product folder but the application layer, which owns the state the queries read.
FOLDERS = ("rota", "domain", "projections", "infrastructure", "replay")
STATE = frozenset({"lock", "projection", "transactions", "configuration", "last_waiting"})
# The names an expression reaching the service's state goes through.
OWNERS = frozenset({"service", "_service", "host", "_host", "commands", "schedules"})
HOSTS = frozenset({"host", "_host"})


def _names(node: ast.expr) -> list[str]:
    """The names along an attribute chain: `self.service.schedules` -> self, service,
    schedules; a call or subscript contributes what it is called on."""
    found: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            found.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            found.append(node.id)
            return found
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return found


def reach_ins(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """Each reach-in of `source`: (line, the attribute read and what it was read from)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Attribute):
            continue
        names = set(_names(node.value))
        if (
            node.attr == "transactions"
            or (node.attr in STATE and names & OWNERS)
            or (node.attr == "directory" and names & HOSTS)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def _product_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_nothing_outside_the_application_reaches_into_the_service() -> None:
    by_file: dict[str, list[tuple[int, str]]] = {}
    for path in _product_files():
        found = reach_ins(path.read_text(), str(path))
        if found:
            by_file[path.relative_to(ROOT).as_posix()] = found
    problems = [
        f"{name}:{line}: {text}" for name, found in sorted(by_file.items()) for line, text in found
    ]
    assert not problems, "read through rota.application.queries:\n" + "\n".join(problems)


def test_the_check_finds_each_kind_of_reach_in() -> None:
    source = """
with service.lock:
    pass
work = self.service.projection.works.get(work_id)
tx = scheduler.service.transactions
row = service.schedules.projection.get(name)
rows = self.commands.projection.active()
self.host.directory.keep(before, executors)
api.scheduler.host.directory.historical[key] = executor
store = anything.transactions.store
owner = scheduler.service.configuration.owner
waiting = scheduler.host.last_waiting
"""
    assert [line for line, _ in reach_ins(source)] == [2, 4, 5, 6, 7, 8, 9, 10, 11, 12]


def test_the_check_leaves_other_projections_and_locks_alone() -> None:
    source = """
name = args.projection
state = reading.projection
with self._lock:
    pass
lock = FileWriterLock(path).lock
ours = stored.projection
views = scheduler.queries.works.holds()
"""
    assert reach_ins(source) == []


LOG_READS = frozenset({"read", "read_stream", "read_streams", "read_prefix", "read_raw"})


def log_reads(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """Each direct read of the log (`<x>.store.read_stream(...)` ...) in `source`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in LOG_READS
            and "store" in _names(node.value)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_web_view_reads_the_log_only_through_the_queries() -> None:
    """The pages (events, a Work's stream for its timeline) read the log through
    `scheduler.queries` (`rota.application.queries.activity`), never the store."""
    problems = [
        f"{path.relative_to(ROOT).as_posix()}:{line}: {text}"
        for path in sorted((ROOT / "rota" / "http" / "web").rglob("*.py"))
        for line, text in log_reads(path.read_text(), str(path))
    ]
    assert not problems, "read the log through rota.application.queries:\n" + "\n".join(problems)
    assert [line for line, _ in log_reads("e = scheduler.store.read_stream('work/a')\n")] == [1]
    assert log_reads("e = scheduler.queries.activity.stream('a')\n") == []
