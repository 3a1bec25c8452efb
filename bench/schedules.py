"""Benchmark: N schedules `every 1m` on one daemon (`python -m bench.schedules`).

Defines N schedules (default 10,000, all on the same minute: the worst burst), runs the
daemon loop (`Scheduler.run`) on real time for `--minutes` nominal minutes, then reads the
log: fires per second within each minute's burst (N fires over the time from the first to
the last fire's recorded time), and the lag from nominal time to the fire's recorded time
(p50, p99, max). `--run` also starts an attempt per fire (a no-op callable); by default the
host starts nothing (`host.starting = False`), so the figures are the schedule runner's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import rota
from rota.application.timestamps import parse_timestamp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--run", action="store_true", help="start an attempt per fire too")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        rota.open(Path(tmp) / "bench.db", owner="bench") as s,
    ):
        s.register("job", lambda ctx: None)
        s.host.starting = args.run
        began = time.perf_counter()
        for i in range(args.schedules):
            s.schedule(f"s{i:05d}", binding="job", every="1m", overlap="allow_all")
        defined = time.perf_counter() - began
        print(f"defined {args.schedules} schedules in {defined:.1f} s")
        start = s.service.now()
        first = start.replace(second=0, microsecond=0).timestamp() + 60
        end = first + 60 * (args.minutes - 1)
        stop = threading.Event()
        daemon = threading.Thread(target=s.run, args=(stop,))
        daemon.start()
        expected = args.schedules * args.minutes
        deadline = time.monotonic() + 60 * (args.minutes + 3)
        fired: list[tuple[datetime, datetime]] = []
        position = 0
        while len(fired) < expected and time.monotonic() < deadline:
            s.store.wait_for_commit(position, 1.0)
            for r in s.store.read(position, 100_000):
                position = r.position
                if r.type == "core.schedule.fired" and r.event.nominal.timestamp() <= end:
                    fired.append((r.event.nominal, parse_timestamp(r.recorded_at)))
        stop.set()
        daemon.join(timeout=120)
        lags = sorted((at - nominal).total_seconds() for nominal, at in fired)
        bursts: dict[datetime, list[datetime]] = {}
        for nominal, at in fired:
            bursts.setdefault(nominal, []).append(at)
        rates = [
            len(times) / max(1e-6, (max(times) - min(times)).total_seconds())
            for times in bursts.values()
        ]
        print(f"fires: {len(fired)} of {expected} over {len(bursts)} nominal minute(s)")
        print(f"fires/s within a burst: {', '.join(f'{r:,.0f}' for r in rates)}")
        if lags:
            p50 = statistics.median(lags)
            p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
            print(f"lag from nominal time: p50 {p50:.2f} s, p99 {p99:.2f} s, max {lags[-1]:.2f} s")


if __name__ == "__main__":
    main()
