"""Mutation testing of the simulator (issue 29, item 5): does it catch real bugs?

Each mutant in `tests/sim/mutants/` is a small patch to product code (domain/, application/,
projections/) that breaks one guarantee; `mutants.toml` names, for each, the invariant
expected to report it, a seed budget and the simulated hours per seed. `detect()` copies the
source tree into a temporary directory in the installed package's layout (`rota/domain` is
`domain/`, as setup.py maps it), applies the patch there, and runs the simulator on that copy
in a subprocess over seeds 1, 2, 3 ... until the first violation. The subprocess asserts that
the `rota` it imported is the copy's: a patch applied to a tree nobody imports would prove
nothing. A control then runs the detecting seed on an unpatched copy, which must stay clean,
so the violation is the patch's doing and not the simulator's or the engine's own.

    .venv/bin/python -P tests/sim/mutation.py [NAME ...] [--seeds N] [--hours H]

prints, per mutant: the invariant expected, the one reported, seeds to detection and the
CPU seconds the search took.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).resolve().parent / "mutants"
# The folders setup.py installs as subpackages of `rota` (the package itself first).
LAYERS = ("rota", "domain", "projections", "application", "infrastructure", "replay")
WRAPPER = Path("infrastructure", "executors", "rota-wrapper")  # built by setup.py, not in git
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "rota-wrapper")

# What runs inside the subprocess, on the copy (argv: the copy's root, first and last seed,
# hours). It checks the copy is what is imported, then prints one JSON line per seed.
WORKER = """
import json, os, signal, sys, time
from pathlib import Path
root = Path(sys.argv[1]).resolve()
import rota, rota.domain, rota.application, rota.projections, rota.infrastructure
for module in (rota, rota.domain, rota.application, rota.projections, rota.infrastructure):
    where = Path(module.__file__).resolve()
    assert where.is_relative_to(root), f"{module.__name__} imported from {where}, not {root}"
from rota.testing.sim.world import World
from rota.testing.sim.workload import Shape
first, last = int(sys.argv[2]), int(sys.argv[3])
hours, limit, flow = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "flow"
seed, began = first, time.process_time()

def stuck(*_):
    message = f"seed {seed} used {limit:g} CPU seconds without finishing its run"
    found = {"invariant": "stuck", "message": message, "positions": []}
    line = {"seed": seed, "events": 0, "violation": found, "cpu": time.process_time() - began}
    print(json.dumps(line), flush=True)
    os._exit(0)

signal.signal(signal.SIGPROF, stuck)
for seed in range(first, last + 1):
    began = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, limit)
    outcome = World(seed, Shape(hours=hours, flow=flow)).run()
    signal.setitimer(signal.ITIMER_PROF, 0)
    v = outcome.violation
    found = None if v is None else {
        "invariant": v.invariant, "message": v.message, "positions": list(v.positions)
    }
    line = {"seed": seed, "events": outcome.events, "violation": found,
            "cpu": time.process_time() - began}
    print(json.dumps(line), flush=True)
    if found is not None:
        break
"""
# What a run that does not finish reports (the worker's "stuck"): a mutant can livelock the
# engine (a pass that appends, and so wakes the next pass, at one simulated instant), which
# no invariant names.
STUCK = "stuck"
# CPU seconds one seed may take before it counts as stuck (a seed of 2 h takes about 2 s).
SEED_CPU_LIMIT = 60.0


@dataclass(frozen=True)
class Mutant:
    """One patch and what the simulator must say about it (an entry of mutants.toml)."""

    name: str
    patch: Path
    invariant: str
    seeds: int
    hours: float
    description: str
    suite: bool = False  # caught within a few seeds: make test runs it (else make soak)
    flow: bool = False  # run with flow control (`Shape.flow`); the mutants before it ran without
    blind: str = ""  # why the simulator is known not to report it (a strict xfail)


@dataclass(frozen=True)
class Detection:
    """What a search over seeds found: the seeds run, the first violation (None: none in
    the budget), its seed, and the CPU seconds the simulations took."""

    seeds_run: int
    violation: dict[str, Any] | None
    seed: int | None
    cpu_seconds: float

    @property
    def invariant(self) -> str | None:
        return None if self.violation is None else str(self.violation["invariant"])


class PatchDoesNotApply(AssertionError):
    """A mutant's patch no longer applies to the tree (the code it breaks has moved)."""


def mutants() -> list[Mutant]:
    """Every mutant of `mutants.toml`, in file order."""
    with (MUTANTS / "mutants.toml").open("rb") as file:
        table = tomllib.load(file)
    return [
        Mutant(
            name=name,
            patch=MUTANTS / entry["patch"],
            invariant=entry["invariant"],
            seeds=int(entry["seeds"]),
            hours=float(entry["hours"]),
            description=entry["description"],
            suite=bool(entry.get("suite", False)),
            blind=entry.get("blind", ""),
            flow=bool(entry.get("flow", False)),
        )
        for name, entry in table["mutant"].items()
    ]


def check_applies(mutant: Mutant, root: Path = ROOT) -> None:
    """Raise `PatchDoesNotApply`, naming the mutant, unless its patch applies to `root`."""
    _apply(mutant, root, check=True)


def _apply(mutant: Mutant, root: Path, *, check: bool = False) -> None:
    command = ["git", "apply", *(["--check"] if check else []), str(mutant.patch)]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PatchDoesNotApply(
            f"mutant {mutant.name}: {mutant.patch.name} does not apply to {root}: "
            f"{done.stderr.strip()}"
        )


@contextmanager
def tree(mutant: Mutant | None) -> Iterator[Path]:
    """A temporary copy of the source tree in the installed layout, with `mutant` applied
    (None: unpatched). The layer folders are copied as in the repository, so the patch's
    paths apply as they are, and linked into the copy of `rota/` where setup.py puts them."""
    with tempfile.TemporaryDirectory(prefix="rota-mutant-") as temp:
        root = Path(temp)
        for layer in LAYERS:
            shutil.copytree(ROOT / layer, root / layer, ignore=IGNORED)
        if mutant is not None:
            _apply(mutant, root)
        for layer in LAYERS[1:]:
            (root / "rota" / layer).symlink_to(root / layer, target_is_directory=True)
        built = _built_wrapper()
        if built is not None:  # the shell executor's program, if the install compiled one
            shutil.copy2(built, root / WRAPPER)
        yield root


def _built_wrapper() -> Path | None:
    for candidate in sorted((ROOT / "build").glob(f"__editable__*/rota/{WRAPPER}")):
        return candidate
    return None


def simulate(
    root: Path,
    first: int,
    last: int,
    hours: float,
    cpu_limit: float = SEED_CPU_LIMIT,
    flow: bool = False,
) -> list[dict[str, Any]]:
    """Run seeds `first`..`last` on the tree at `root` in a subprocess, stopping at the
    first violation (a seed past `cpu_limit` CPU seconds is one: `stuck`); one record per
    seed run."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    limit = str(cpu_limit)
    command = [
        sys.executable,
        "-P",
        "-c",
        WORKER,
        str(root),
        str(first),
        str(last),
        str(hours),
        limit,
        "flow" if flow else "no-flow",
    ]
    done = subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, check=False, timeout=3600
    )
    if done.returncode != 0:
        raise RuntimeError(f"the simulator failed on {root}:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def detect(mutant: Mutant, seeds: int | None = None, hours: float | None = None) -> Detection:
    """Seeds 1..`seeds` (the mutant's budget by default) on the mutated copy, until the
    first violation."""
    budget = mutant.seeds if seeds is None else seeds
    with tree(mutant) as root:
        runs = simulate(root, 1, budget, mutant.hours if hours is None else hours, flow=mutant.flow)
    found = next((r for r in runs if r["violation"] is not None), None)
    return Detection(
        seeds_run=len(runs),
        violation=None if found is None else found["violation"],
        seed=None if found is None else int(found["seed"]),
        cpu_seconds=sum(r["cpu"] for r in runs),
    )


def control(seed: int, hours: float, flow: bool = False) -> dict[str, Any] | None:
    """The violation (None: none) of `seed` on an unpatched copy: the control."""
    with tree(None) as root:
        (run,) = simulate(root, seed, seed, hours, flow=flow)
    return run["violation"]  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    """Print the detection table (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--seeds", type=int, help="seed budget (default: each mutant's)")
    parser.add_argument("--hours", type=float, help="simulated hours (default: each mutant's)")
    parser.add_argument(
        "--control", action="store_true", help="also run the detecting seed unpatched"
    )
    args = parser.parse_args(argv)
    chosen = [m for m in mutants() if not args.names or m.name in args.names]
    header = ("mutant", "expected", "detected", "seed", "seeds run", "cpu s", "control")
    print(" | ".join(header))
    missed = 0
    for mutant in chosen:
        found = detect(mutant, args.seeds, args.hours)
        clean = "-"
        if args.control and found.seed is not None:
            hours = mutant.hours if args.hours is None else args.hours
            clean = "clean" if control(found.seed, hours, mutant.flow) is None else "VIOLATED"
        detected = found.invariant or "undetected"
        missed += detected != mutant.invariant and not mutant.blind  # blind: known
        row = (mutant.name, mutant.invariant, detected, str(found.seed or "-"),
               str(found.seeds_run), f"{found.cpu_seconds:.1f}", clean)  # fmt: skip
        print(" | ".join(row), flush=True)
        if found.violation is not None:
            print(f"    {found.violation['message'][:300]}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
