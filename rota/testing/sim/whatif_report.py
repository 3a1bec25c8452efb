"""What-if figures: the configurations replayed under, and recorded against simulated.

A `Plan` comes from a rota.toml (`plan_from_config`: its settings, bindings and budgets,
checked against what the export uses) or, for the recorded configuration when none is
given, from the log itself (`inferred_plan`: the pinned bindings and lease, the budgets
the log configured, and each pool's limit taken as the most attempts it ever held at
once; scope limits are not in a log and are left unbounded). `figures` measures one
recording per binding and per scope; `calibration` compares two admission orders.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.domain.errors import RotaError
from rota.domain.policy import POOL_AGENTS, POOL_JOBS, Settings
from rota.infrastructure.config import Config, ConfigError
from rota.testing.sim.recorded import Recording, Work, read_export
from rota.testing.sim.whatif import Plan, replay


def plan_from_config(path: Path, recording: Recording) -> Plan:
    """The configuration at `path`, refused when it cannot run the export's Works. A
    config without any [[bindings]] keeps the bindings the log pinned (an application
    that registers callables in process defines its bindings in code, not in rota.toml)."""
    config = plan_of(Config.load(path, required=True), recording)
    return Plan(config.settings, config.bindings, config.budgets, str(path))


def plan_of(config: Config, recording: Recording) -> Plan:
    """`config` as a plan for `recording` (`plan_from_config`)."""
    if not config.bindings:
        return Plan(config.settings, dict(recording.bindings), config.budgets, config.source)
    used = sorted({w.binding for w in recording.works.values()})
    missing = [b for b in used if b not in config.bindings]
    if missing:
        raise ConfigError(
            f"{config.source}: defines no binding named {', '.join(missing)}, which the "
            f"export's Works run on: add them as [[bindings]] (executors the export "
            f"registered: {', '.join(sorted(recording.registrations))}), or leave out "
            "[[bindings]] to keep the recorded ones"
        )
    config.check_executors(sorted(recording.registrations))
    return Plan(config.settings, dict(config.bindings), config.budgets, config.source)


def inferred_plan(recording: Recording) -> Plan:
    """The recorded configuration as far as the log shows it (module docstring)."""
    peaks = pool_peaks(recording)
    others = {p: n for p, n in peaks.items() if p not in (POOL_AGENTS, POOL_JOBS)}
    settings = Settings(
        concurrency=peaks.get(POOL_AGENTS, 4),
        job_concurrency=peaks.get(POOL_JOBS, 4),
        pool_limits=others,
        lease_seconds=recording.lease_seconds,
        timeout_seconds=recording.timeout_seconds,
        max_segments=recording.max_segments,
    )
    return Plan(settings, dict(recording.bindings), recording.budgets, "inferred from the log")


def pool_peaks(recording: Recording) -> dict[str, int]:
    """The most attempts each pool held at once (an end frees its slot before a claim at
    the same moment takes one, as one pass records an outcome and then admits)."""
    moments: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for work in recording.works.values():
        for attempt in work.attempts.values():
            end = attempt.ended_at if attempt.ended_at is not None else math.inf
            moments[attempt.pool] += [(attempt.claimed_at, 1), (end, -1)]
    peaks: dict[str, int] = {}
    for pool, marks in moments.items():
        held = peak = 0
        for _, delta in sorted(marks):
            held += delta
            peak = max(peak, held)
        peaks[pool] = peak
    return peaks


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def group_figures(works: list[Work]) -> dict[str, Any]:
    """Works, starts, waits (submit to first claim), holds, completions, throughput."""
    waits = [w.first_claim - w.submitted_at for w in works if w.first_claim is not None]
    done = [w.completed_at for w in works if w.completed_at is not None]
    first = min(w.submitted_at for w in works)
    hours = (max(done) - first) / 3600.0 if done else 0.0
    return {
        "works": len(works),
        "starts": sum(len(w.attempts) for w in works),
        "mean_wait_s": round(sum(waits) / len(waits), 3) if waits else None,
        "p95_wait_s": round(_p95(waits), 3) if waits else None,
        "holds": sum(w.holds for w in works),
        "completed": len(done),
        "per_hour": round(len(done) / hours, 2) if hours > 0 else None,
    }


def figures(recording: Recording) -> dict[str, dict[str, Any]]:
    """`group_figures` for all Works, and per binding and per scope."""
    works = list(recording.works.values())
    found: dict[str, dict[str, Any]] = {"all": {"all": group_figures(works)}}
    keys: dict[str, Callable[[Work], str]] = {
        "binding": lambda w: w.binding,
        "scope": lambda w: w.scope,
    }
    for name, key in keys.items():
        groups: dict[str, list[Work]] = defaultdict(list)
        for work in works:
            groups[key(work)].append(work)
        found[name] = {g: group_figures(ws) for g, ws in sorted(groups.items())}
    return found


def calibration(recorded: Recording, simulated: Recording) -> dict[str, Any]:
    """Whether the replay claimed the same attempts in the same order, and where not. Only
    the replay's claims within the recorded span count: a log ends (an export is taken)
    while retries may still be due, and the replay runs on until its Works settle."""
    want, got = recorded.order(), simulated.order(recorded.end)
    index = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if index is None and len(want) != len(got):
        index = min(len(want), len(got))
    divergence = None
    if index is not None:
        divergence = {
            "index": index,
            "recorded": want[index] if index < len(want) else None,
            "simulated": got[index] if index < len(got) else None,
        }
    return {"match": index is None, "claims": len(want), "first_divergence": divergence}


def side_by_side(recorded: Recording, simulated: Recording) -> dict[str, Any]:
    """Each group's recorded and simulated figures, side by side."""
    rec, sim = figures(recorded), figures(simulated)
    return {
        kind: {
            group: {"recorded": rec[kind].get(group), "simulated": sim[kind].get(group)}
            for group in sorted(set(rec[kind]) | set(sim[kind]))
        }
        for kind in ("all", "binding", "scope")
    }


COLUMNS = ("works", "starts", "mean_wait_s", "p95_wait_s", "holds", "completed", "per_hour")


def render(report: dict[str, Any]) -> str:
    """The report as text: the calibration, then one table a grouping."""
    cal = report["calibration"]
    lines = [
        f"what-if: {report['export']} ({report['works']} Works) under {report['config']}",
        f"recorded configuration: {report['recorded_config']}",
        f"calibration (replayed under the recorded configuration): admission order "
        f"{'matches' if cal['match'] else 'DIFFERS'} over {cal['claims']} claims",
    ]
    if cal["first_divergence"] is not None:
        d = cal["first_divergence"]
        lines.append(
            f"  first divergence at claim {d['index']}: "
            f"recorded {d['recorded']}, simulated {d['simulated']}"
        )
    for run, refused in report["skipped"].items():
        lines += [f"{run}: skipped (refused by the engine) {line}" for line in refused]
    head = f"{'':<22}" + "".join(f"{c:>12}" for c in COLUMNS)
    for kind in ("all", "binding", "scope"):
        lines += ["", f"by {kind}: recorded / simulated", head]
        for group, pair in report["groups"][kind].items():
            for side in ("recorded", "simulated"):
                row = pair[side] or {}
                label = f"{group if side == 'recorded' else '':<14}{side[:3]:>5}   "
                lines.append(label + "".join(f"{_cell(row.get(c)):>12}" for c in COLUMNS))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def what_if(export: Path, config: Path | None, recorded_config: Path | None) -> dict[str, Any]:
    """Replay `export` under its recorded configuration (the calibration) and, when
    `config` is given, under that one too; recorded and simulated figures side by side."""
    recorded = read_export(export)
    base = (
        plan_from_config(recorded_config, recorded)
        if recorded_config is not None
        else inferred_plan(recorded)
    )
    alternative = plan_from_config(config, recorded) if config is not None else base
    calibrated = replay(recorded, base)
    simulated = calibrated if alternative is base else replay(recorded, alternative)
    return {
        "export": str(export),
        "works": len(recorded.works),
        "recorded_config": base.source,
        "config": alternative.source,
        "calibration": calibration(recorded, calibrated),
        "skipped": {"calibration": calibrated.skipped}
        | ({} if simulated is calibrated else {"simulated": simulated.skipped}),
        "groups": side_by_side(recorded, simulated),
    }


def what_if_main(
    export: Path, config: Path | None, recorded_config: Path | None, as_json: bool
) -> int:
    """`python -m rota.testing.sim --workload-from EXPORT [--config ALT.toml]`: print the
    report (text, or one JSON document); exit 1 when the calibration does not match. A
    missing or unreadable export or an unusable config exits with what to fix."""
    try:
        report = what_if(export, config, recorded_config)
    except RotaError as exc:
        raise SystemExit(f"what-if: {exc}") from None
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(report))
    return 0 if report["calibration"]["match"] else 1


__all__ = [
    "calibration",
    "figures",
    "inferred_plan",
    "plan_from_config",
    "plan_of",
    "pool_peaks",
    "render",
    "side_by_side",
    "what_if",
    "what_if_main",
]
