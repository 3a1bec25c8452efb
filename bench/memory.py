"""Memory of the paths an operator runs must follow the active Works, not the log's history.

    python -m bench.memory                      # 10,000 and 1,000,000 quiet Works, 1,000 active
    python -m bench.memory --quiet 10000 --quiet 100000   # other sizes (repeatable)

Each store comes from the fast generator (`bench.bulk_log`: `--quiet` completed Works and
`--active` running ones, whose leases run a day past the build, owned by another host) with
its projections rebuilt once (`rota replay rebuild`); both are cached under `--cache`
(default /tmp/rota-bench-logs) between runs, never in the repository. Then, each in a
fresh process, the peak RSS (`ru_maxrss` of that process alone, from `wait4` in a small
launcher: see LAUNCHER) of:
- `rota run`: the daemon over the store, stopped (SIGTERM) once its memory has been steady
  for 3 s (at least 5 s after start; at most 60 s), including its closing summary;
- `rota work list --limit 16 --json`: listing the first page of Works;
- `rota work list --state running --json`: every active Work (the held ones: no quiet Work
  is running);
- the HTTP views that count every Work (`bench.http_counts`: `/metrics` scraped twice, the
  web view's overview, `GET /v1/holds`), as `rota serve` runs them.
Target (issue 18): on the largest store, each within 1.5x of the smallest store's figure
in the same run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .bulk_log import cached
from .common import command_line, progress

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.5


def rota(*args: str) -> list[str]:
    return [sys.executable, "-P", "-m", "rota", *args]


def with_projections(path: Path) -> None:
    """Rebuild the store's projections unless they are there."""
    if Path(f"{path}.projections").exists():
        return
    progress(f"rebuilding the projections of {path.name} ...")
    subprocess.run(
        rota("--store", str(path), "replay", "rebuild"),
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


# A child's ru_maxrss starts from its parent's RSS at the fork (Linux keeps the high-water
# mark across exec), so a command started by this process, which built a 1M-Work store,
# would report this process's peak. Each command is started by this small launcher instead
# (a bare interpreter, ~10 MiB, far under any rota command): it forwards SIGTERM, waits, and
# prints its child's CPU seconds (user + system, its children's included), then its
# ru_maxrss (KiB) as the last line of stderr.
LAUNCHER = """\
import os, signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
signal.signal(signal.SIGTERM, lambda number, frame: child.send_signal(number))
_, status, usage = os.wait4(child.pid, 0)
sys.stderr.write(f"\\ncpu-seconds {usage.ru_utime + usage.ru_stime}\\n")
sys.stderr.write(f"maxrss-kib {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def grandchild(pid: int) -> int | None:
    """The launcher's child (the measured command), once it exists."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def measured(command: list[str], *, daemon: bool = False) -> tuple[float, float, str]:
    """Run `command` in a new process: its peak RSS in MiB (its own `ru_maxrss`, see
    LAUNCHER), wall seconds and stdout's size (a daemon is stopped once its memory is
    steady, see the module docstring)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-S", "-c", LAUNCHER, *command], cwd=ROOT, stdout=out, stderr=err
        )
        if daemon:
            steady, last = 0, -1
            while (target := grandchild(child.pid)) is None and child.poll() is None:
                time.sleep(0.05)
            status = Path(f"/proc/{target}/status")
            while time.perf_counter() - started < 60:
                time.sleep(0.5)
                try:  # (a process that ended has no VmHWM line: stop waiting)
                    hwm = next(
                        int(line.split()[1])
                        for line in status.read_text().splitlines()
                        if line.startswith("VmHWM:")
                    )
                except (OSError, StopIteration):
                    break
                steady = steady + 1 if hwm == last else 0
                last = hwm
                if steady >= 6 and time.perf_counter() - started > 5:
                    break
            os.kill(child.pid, signal.SIGTERM)
        code = child.wait()
        wall = time.perf_counter() - started
        err.seek(0)
        lines = err.read().decode().splitlines()
        if code != 0 or not lines or not lines[-1].startswith("maxrss-kib "):
            raise SystemExit(f"{' '.join(command)} failed ({code}):\n" + "\n".join(lines))
        size = out.tell()
    return int(lines[-1].split()[1]) / 1024, wall, f"{size:,} B"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quiet", type=int, action="append", help="quiet Works (repeatable)")
    parser.add_argument("--active", type=int, default=1_000, help="active (running) Works")
    parser.add_argument("--cache", default="/tmp/rota-bench-logs")
    args = parser.parse_args(argv)
    sizes = args.quiet or [10_000, 1_000_000]
    print(f"command: {command_line()}")
    print("peak RSS per process (ru_maxrss); stores from bench.bulk_log, cached in", args.cache)
    print()
    print(
        "| quiet Works | active | events | `rota run` | `work list --limit 16` "
        "| `work list --state running` | HTTP counts |"
    )
    print("|---|---|---|---|---|---|---|")
    figures: list[tuple[float, float, float, float]] = []
    for quiet in sizes:
        path = Path(args.cache) / f"scale-{quiet}-{args.active}-0.db"
        progress(f"building (or reusing) {path} ...")
        counts = cached(path, quiet, args.active)
        with_projections(path)
        store = ("--store", str(path))
        progress("rota run ...")
        run = measured(rota(*store, "run"), daemon=True)
        progress("rota work list --limit 16 ...")
        first = measured(rota(*store, "work", "list", "--limit", "16", "--json"))
        progress("rota work list --state running ...")
        active = measured(rota(*store, "work", "list", "--state", "running", "--json"))
        progress("HTTP counts ...")
        http = measured([sys.executable, "-m", "bench.http_counts", str(path)])
        figures.append((run[0], first[0], active[0], http[0]))
        print(
            f"| {quiet:,} | {args.active:,} | {counts['events']:,} "
            f"| {run[0]:.0f} MiB ({run[1]:.1f} s) | {first[0]:.0f} MiB ({first[1]:.1f} s) "
            f"| {active[0]:.0f} MiB ({active[1]:.1f} s, {active[2]}) "
            f"| {http[0]:.0f} MiB ({http[1]:.1f} s) |",
            flush=True,
        )
    small, large = figures[0], figures[-1]
    print()
    for name, a, b in zip(
        ("rota run", "work list --limit 16", "work list --state running", "HTTP counts"),
        small,
        large,
        strict=True,
    ):
        ratio = b / a
        verdict = "MET" if ratio <= TARGET else "MISSED"
        print(f"{name}: {ratio:.2f}x the smallest store's RSS (target <= {TARGET}x): {verdict}")


if __name__ == "__main__":
    main()
