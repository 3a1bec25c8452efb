"""`python -m rota.testing.sim`: run seeds of the simulator, report, replay a failure.

    python -m rota.testing.sim --seed 7                 one run, a line about it
    python -m rota.testing.sim --seeds 50 --json        seeds 1..50 (--first moves them)
    python -m rota.testing.sim --seeds 200 --fresh      200 seeds drawn from the OS
    python -m rota.testing.sim --seed 7 --until 1800    replay seed 7 up to a position
    python -m rota.testing.sim --seed 7 --export F      and write its log as an export
    python -m rota.testing.sim --seeds 5 --sqlite DIR   on SQLite files in DIR (slower)
    python -m rota.testing.sim --workload-from F --recorded-config R.toml --config ALT.toml
                                                        what-if: F's workload under ALT.toml

A run is named by its seed and its shape (`--hours --hosts --works --schedules
--no-faults --no-flow`): the same seed and shape give the same log, byte for byte, in any process
(`digest` is the head of the hash chain; `--export` writes the log in `rota export`'s
format). On a violation it prints the seed, the invariant, the event positions involved
and the command that replays it, writes a regression case with `--regressions DIR`
(`seed-<S>.json`: the seed, the shape and what was found), and exits 1.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from rota.testing.sim.checks import names
from rota.testing.sim.whatif_report import what_if_main
from rota.testing.sim.workload import Shape
from rota.testing.sim.world import Outcome, World


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rota.testing.sim",
        description="Run rota's engine under the deterministic simulator.",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, help="run this one seed")
    which.add_argument("--seeds", type=int, default=None, help="run this many seeds")
    p.add_argument("--first", type=int, default=1, help="the first of --seeds (default 1)")
    p.add_argument("--fresh", action="store_true", help="draw --seeds from the OS instead")
    p.add_argument("--until", type=int, help="stop once the log holds this position")
    p.add_argument("--hours", type=float, default=2.0, help="simulated hours a run (2)")
    p.add_argument("--hosts", type=int, default=3, help="simulated hosts (3)")
    p.add_argument("--works", type=int, default=100, help="Works submitted a run (100)")
    p.add_argument("--schedules", type=int, default=10, help="schedules defined (10)")
    p.add_argument("--no-faults", action="store_true", help="no faults, crashes or chaos")
    p.add_argument(
        "--no-flow", action="store_true", help="no keys, priorities, throttles or flow rules"
    )
    p.add_argument("--sqlite", type=Path, metavar="DIR", help="run on SQLite files in DIR (slower)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--export", type=Path, help="write the (one) run's log as an export")
    p.add_argument("--regressions", type=Path, help="write each failing seed here")
    p.add_argument(
        "--workload-from", type=Path, help="what-if: replay this export's workload instead"
    )
    p.add_argument("--config", type=Path, help="what-if: the configuration to replay under")
    p.add_argument(
        "--recorded-config", type=Path, help="what-if: the configuration the export ran under"
    )
    return p


def shape_of(args: argparse.Namespace) -> Shape:
    for name in ("hours", "hosts", "works", "schedules"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name} must be positive, got {getattr(args, name)}")
    return Shape(
        hosts=args.hosts,
        works=args.works,
        schedules=args.schedules,
        hours=args.hours,
        faults=not args.no_faults,
        flow=not args.no_flow,
    )


def seeds_of(args: argparse.Namespace) -> list[int]:
    if args.seed is not None:
        return [args.seed]
    count = 1 if args.seeds is None else args.seeds
    if count <= 0:
        raise SystemExit(f"--seeds must be positive, got {count}")
    if args.fresh:
        return [secrets.randbits(32) for _ in range(count)]
    return list(range(args.first, args.first + count))


def replay_command(seed: int, shape: Shape, position: int | None = None) -> str:
    words = ["python -m rota.testing.sim", f"--seed {seed}"]
    defaults = Shape()
    for name in ("hours", "hosts", "works", "schedules"):
        if getattr(shape, name) != getattr(defaults, name):
            words.append(f"--{name} {getattr(shape, name)}")
    if not shape.faults:
        words.append("--no-faults")
    if not shape.flow:
        words.append("--no-flow")
    if position is not None:
        words.append(f"--until {position}")
    return " ".join(words)


def run_json(outcome: Outcome) -> dict[str, Any]:
    found = outcome.violation
    return {
        "seed": outcome.seed,
        "steps": outcome.steps,
        "events": outcome.events,
        "simulated_seconds": round(outcome.simulated_seconds, 3),
        "digest": outcome.head_hash,
        "violation": None
        if found is None
        else {
            "invariant": found.invariant,
            "message": found.message,
            "positions": list(found.positions),
        },
        "faults": dict(sorted(outcome.faults.items())),
        "counts": dict(sorted(outcome.counts.items())),
        "event_types": dict(sorted(outcome.types.items())),
    }


def write_regression(directory: Path, outcome: Outcome, shape: Shape) -> Path:
    """A regression case: the seed, the shape, and what the run found."""
    assert outcome.violation is not None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed-{outcome.seed}.json"
    case = {
        "seed": outcome.seed,
        "shape": {
            "hours": shape.hours,
            "hosts": shape.hosts,
            "works": shape.works,
            "schedules": shape.schedules,
            "faults": shape.faults,
            "flow": shape.flow,
        },
        "found": run_json(outcome)["violation"],
        "expected": "clean",
    }
    path.write_text(json.dumps(case, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.workload_from is not None:
        return what_if_main(args.workload_from, args.config, args.recorded_config, args.json)
    if args.config is not None or args.recorded_config is not None:
        raise SystemExit("--config and --recorded-config go with --workload-from EXPORT")
    shape, seeds = shape_of(args), seeds_of(args)
    if (args.export or args.until is not None) and len(seeds) != 1:
        raise SystemExit("--export and --until need one run: give --seed")
    if args.sqlite is not None and not args.sqlite.is_dir():
        raise SystemExit(f"--sqlite {args.sqlite}: not a folder; create it first")
    began, runs, failed = time.process_time(), [], 0
    for seed in seeds:
        world = World(seed, shape, until=args.until, keep=True, sqlite=args.sqlite)
        outcome = world.run()
        runs.append(outcome)
        if outcome.violation is not None:
            failed += 1
            if args.regressions is not None:
                write_regression(args.regressions, outcome, shape)
        if not args.json:
            print(line(outcome, shape), flush=True)
            if outcome.violation is not None:
                print(involved(world, outcome.violation.positions), flush=True)
        if args.export is not None:
            world.export(args.export)
        else:
            world.drop()
    cpu = max(time.process_time() - began, 1e-9)
    events = sum(o.events for o in runs)
    hours = sum(o.simulated_seconds for o in runs) / 3600.0
    summary = {
        "seeds": [o.seed for o in runs],
        "invariants": sorted(names()),
        "events": events,
        "simulated_hours": round(hours, 3),
        "cpu_seconds": round(cpu, 3),
        "simulated_hours_per_cpu_minute": round(hours / (cpu / 60.0), 2),
        "events_per_second": round(events / cpu, 1),
        "violations": failed,
        "runs": [run_json(o) for o in runs],
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(
            f"{len(runs)} seeds, {events} events checked against {len(names())} invariants, "
            f"{hours:.1f} simulated hours in {cpu:.1f} CPU s "
            f"({summary['simulated_hours_per_cpu_minute']} h per CPU minute, "
            f"{summary['events_per_second']:.0f} events/s); {failed} violations"
        )
    return 1 if failed else 0


def involved(world: World, positions: Sequence[int]) -> str:
    """The events a violation names, one line each (position, time, stream, event)."""
    lines = []
    for position in sorted(set(positions)):
        if position < 1:
            continue
        for recorded in world.log.read(position - 1, 1):
            data = msgspec.json.encode(recorded.event).decode()
            data = data if len(data) <= 240 else data[:237] + "..."
            lines.append(f"  {position} {recorded.recorded_at} {recorded.stream}: {data}")
    return "\n".join(lines)


def line(outcome: Outcome, shape: Shape) -> str:
    found = outcome.violation
    head = (
        f"seed {outcome.seed}: {outcome.events} events, "
        f"{outcome.simulated_seconds / 3600:.2f} h, digest {outcome.head_hash[:16]}"
    )
    if found is None:
        return f"{head}: clean"
    where = ", ".join(str(p) for p in found.positions)
    last = max(found.positions) if found.positions else None
    return (
        f"{head}: VIOLATION of {found.invariant} at positions {where}\n  {found.message}\n"
        f"  replay: {replay_command(outcome.seed, shape, last)}"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
