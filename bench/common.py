"""Small helpers shared by the benchmarks: temp files, timing, tables, peak RSS."""

from __future__ import annotations

import argparse
import math
import os
import platform
import resource
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

REPEATS = 3


def run_options(parser: argparse.ArgumentParser, quick: str) -> None:
    """`--repeats`, `--quick` (what it runs: `quick`) and `--dir`, in that order."""
    parser.add_argument("--repeats", type=int, default=REPEATS, help="best of N (default 3)")
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--dir", default=None, help="where the temporary files go")


@contextmanager
def workdir(base: str | None) -> Iterator[Path]:
    """A fresh temporary directory (under `base`, else the system temp dir), removed after."""
    with tempfile.TemporaryDirectory(prefix="rota-bench-", dir=base) as name:
        yield Path(name)


def remove_db(path: Path) -> None:
    """Delete a SQLite file with its WAL and shared-memory companions."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class Best:
    """The best (highest) rate seen per (system, case) over the repeats."""

    def __init__(self) -> None:
        self.rates: dict[tuple[str, str], float] = {}
        self.runs: dict[tuple[str, str], list[float]] = {}

    def add(self, system: str, case: str, events: int, seconds: float) -> float:
        rate = events / seconds if seconds > 0 else float("inf")
        key = (system, case)
        self.runs.setdefault(key, []).append(rate)
        self.rates[key] = max(self.rates.get(key, 0.0), rate)
        return rate

    def get(self, system: str, case: str) -> float:
        return self.rates.get((system, case), float("nan"))

    def spread(self, system: str, case: str) -> str:
        """All measured rates of one cell, best first (for the reader to judge the noise)."""
        runs = sorted(self.runs.get((system, case), []), reverse=True)
        return " / ".join(fmt_rate(rate) for rate in runs)


def scalar(conn: apsw.Connection, sql: str) -> Any:
    """The first column of the first row of `sql`."""
    row = conn.execute(sql).fetchone()
    if row is None:
        raise LookupError(f"no row for {sql!r}")
    return row[0]


def timed(body: Callable[[], int]) -> tuple[int, float]:
    """Run `body` (which returns how many events it handled); return (events, seconds)."""
    start = time.perf_counter()
    events = body()
    return events, time.perf_counter() - start


def fmt_rate(rate: float) -> str:
    if math.isnan(rate):  # not measured
        return "-"
    if rate >= 1_000_000:
        return f"{rate / 1_000_000:.2f}M"
    if rate >= 100_000:
        return f"{rate / 1_000:.0f}k"
    if rate >= 1_000:
        return f"{rate / 1_000:.1f}k"
    return f"{rate:.0f}"


def fmt_ratio(numerator: float, denominator: float) -> str:
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return "-"
    return f"{numerator / denominator:.2f}x"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain left/right aligned text table (first column left, the others right)."""
    widths = [len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "| " + " | ".join(parts) + " |"

    print(line(headers))
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in rows:
        print(line(row))


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / (1024 * 1024)


def command_line() -> str:
    """The command as it was typed (interpreter, `-m module`, options)."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if argv and os.path.isabs(argv[0]):
        argv[0] = os.path.relpath(argv[0]) if argv[0].startswith(os.getcwd()) else argv[0]
    return " ".join(shlex.quote(arg) for arg in argv)


def print_header(title: str, directory: Path) -> None:
    print(f"# {title}")
    print(f"command: {command_line()}")
    print(
        f"python {platform.python_version()}, apsw {apsw.apsw_version()} "
        f"(SQLite {apsw.sqlite_lib_version()}), {os.cpu_count()} CPUs, {platform.machine()}"
    )
    print(f"files in: {directory}")
    print()


def progress(message: str) -> None:
    """A status line on stderr, so stdout stays a clean report."""
    print(message, file=sys.stderr, flush=True)
