"""Fair share: a small tenant's wait from ready to start beside a noisy neighbour.

    python -m bench.fairness                 # 10 small, 1,000 noisy Works, concurrency 4
    python -m bench.fairness --noisy 100 --duration 5

One scheduler (`rota.open("memory://")`) on a `ManualClock`, a pool of fixed size
(`--concurrency`, default 4), and an executor whose every attempt takes `--duration`
simulated seconds (default 10): it completes when the clock has moved that far past its
launch. The driver ticks until nothing more starts, then moves the clock to the next
completion, so the run is deterministic (no thread, no sleep).

The noisy tenant's Works (`--noisy`, key `tenant:noisy`) are submitted first (older), the
small tenant's (`--small`, key `tenant:small`) after them, all at the same instant. The
small tenant's wait per Work = its first claim's time minus its submission's time, read
from the log. Three cases:

- alone: the small tenant's Works, no neighbour;
- fair share: both tenants, `[[keys]] key = "tenant:*" weight = 1` (equal weights), and
  the same with no `[[keys]]` at all (fair share between keys is the default);
- fair share with `[settings] starvation_share = 0` (no start reserved for the oldest ready
  Work: what the starvation bound costs the small tenant here);
- FIFO: both, the Works carrying no key (one flow: readiness order, what rota did before
  flow control).

Goal (issue 30): the small tenant's p99 under fair share within 2x of its p99 alone.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import rota
from bench.common import print_table
from rota.domain.events import AttemptClaimed, WorkSubmitted
from rota.domain.flow import OLDEST
from rota.infrastructure.clock import ManualClock

START = datetime(2026, 11, 2, 10, tzinfo=UTC)
GOAL = 2.0  # fair-share p99 / alone p99


class Timed(rota.Executor):
    """Every attempt runs `duration` simulated seconds, then reports success."""

    name = "timed"
    pool = "agents"

    def __init__(self, clock: ManualClock, duration: float) -> None:
        self.clock, self.duration = clock, timedelta(seconds=duration)
        self.running: list[tuple[datetime, Any]] = []  # (ends at, done)

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        self.running.append((self.clock.now() + self.duration, done))

    def next_end(self) -> datetime | None:
        return min((end for end, _ in self.running), default=None)

    def finish_due(self) -> int:
        now = self.clock.now()
        due = [item for item in self.running if item[0] <= now]
        self.running = [item for item in self.running if item[0] > now]
        for _, done in due:
            done(rota.Result())
        return len(due)


@dataclass
class Case:
    name: str
    noisy: bool  # the noisy tenant submits too
    keyed: bool  # the Works carry their tenant's key
    rules: bool  # [[keys]] tenant:* weight 1 configured
    share: int | None = None  # [settings] starvation_share (None: the default, 10)


CASES = [
    Case("alone", noisy=False, keyed=True, rules=True),
    Case("fair share", noisy=True, keyed=True, rules=True),
    Case("fair share, no [[keys]]", noisy=True, keyed=True, rules=False),
    Case("fair share, starvation_share 0", noisy=True, keyed=True, rules=True, share=0),
    Case("FIFO (no keys)", noisy=True, keyed=False, rules=False),
]


def run_case(
    case: Case, small: int, noisy: int, concurrency: int, duration: float
) -> tuple[list[float], str]:
    """The small tenant's waits (seconds, ready to start), in submission order, and the
    order of the starts up to the small tenant's last (`s` small, `n` noisy, `*` a start
    the starvation bound chose)."""
    clock = ManualClock(START)
    config: dict[str, Any] = {"settings": {"concurrency": concurrency}}
    if case.share is not None:
        config["settings"]["starvation_share"] = case.share
    if case.rules:
        config["keys"] = [{"key": "tenant:*", "weight": 1}]
    with rota.open("memory://", clock=clock, config=config, owner="fairness") as s:
        executor = Timed(clock, duration)
        s.register("timed", executor=executor)

        def submit(tenant: str, count: int) -> list[str]:
            ids = [f"{tenant}-{n:05d}" for n in range(count)]
            keys = [f"tenant:{tenant}"] if case.keyed else []
            for work_id in ids:
                s.submit(work_id, binding="timed", keys=keys)
            return ids

        if case.noisy:
            submit("noisy", noisy)
        small_ids = set(submit("small", small))
        claimed: dict[str, datetime] = {}
        submitted: dict[str, datetime] = {}
        position = 0
        order: list[str] = []
        while len(claimed) < small:
            while True:  # passes until nothing more starts at this instant
                executor.finish_due()
                report = s.tick()
                if not report.started and not report.finished and not executor.finish_due():
                    break
            for recorded in s.store.read(position, 10_000):
                position = recorded.position
                event = recorded.event
                if isinstance(event, AttemptClaimed):
                    order.append(event.work_id[0] + ("*" if OLDEST in event.passes else ""))
                if isinstance(event, WorkSubmitted | AttemptClaimed):
                    work_id = event.work_id
                    if work_id in small_ids:
                        into = submitted if isinstance(event, WorkSubmitted) else claimed
                        into.setdefault(work_id, recorded.recorded_time)
            if len(claimed) >= small:
                break
            end = executor.next_end()
            if end is None:
                raise RuntimeError(f"{case.name}: nothing runs and the small tenant waits")
            clock.advance((end - clock.now()).total_seconds())
    waits = [(claimed[w] - submitted[w]).total_seconds() for w in sorted(small_ids)]
    last_small = max(i for i, start in enumerate(order) if start.startswith("s"))
    return waits, "".join(order[: last_small + 1])


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank (no interpolation): the smallest value with p% of them at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def ratio(numerator: float, denominator: float, digits: int = 2) -> str:
    if denominator == 0:
        return "0 / 0" if numerator == 0 else "inf (no wait alone)"
    return f"{numerator / denominator:.{digits}f}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--small", type=int, default=10, help="small tenant's Works (10)")
    parser.add_argument("--noisy", type=int, default=1_000, help="noisy tenant's Works (1000)")
    parser.add_argument("--concurrency", type=int, default=4, help="pool size (4)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a Work runs (10)")
    args = parser.parse_args(argv)
    print(
        f"# fairness: {args.small} small-tenant Works beside {args.noisy:,} noisy ones "
        f"(submitted first), concurrency {args.concurrency}, {args.duration:g} s a Work"
    )
    print()
    results: dict[str, tuple[float, float, list[float]]] = {}
    orders: dict[str, str] = {}
    for case in CASES:
        waits, order = run_case(case, args.small, args.noisy, args.concurrency, args.duration)
        results[case.name] = (percentile(waits, 50), percentile(waits, 99), waits)
        orders[case.name] = order
    rows = [
        [name, f"{p50:g}", f"{p99:g}", " ".join(f"{w:g}" for w in waits)]
        for name, (p50, p99, waits) in results.items()
    ]
    print_table(["case", "p50 wait s", "p99 wait s", "every wait s"], rows)
    print()
    alone, fair, fifo = results["alone"], results["fair share"], results["FIFO (no keys)"]
    ratios = [
        ["fair share / alone", ratio(fair[0], alone[0]), ratio(fair[1], alone[1])],
        ["fair share / FIFO", ratio(fair[0], fifo[0], 3), ratio(fair[1], fifo[1], 3)],
    ]
    print_table(["ratio", "p50", "p99"], ratios)
    print()
    print("starts up to the small tenant's last (s small, n noisy, * chosen as the oldest):")
    for name in ("alone", "fair share", "fair share, starvation_share 0"):
        print(f"  {name:30} {orders[name]}")
    verdict = "MET" if fair[1] <= GOAL * alone[1] else "MISSED"
    print()
    print(f"goal: small tenant's p99 under fair share <= {GOAL:g}x its p99 alone: {verdict}")


if __name__ == "__main__":
    main()
