"""Idle CPU of `rota run` with and without `--http`, measured in the same run, interleaved.

    python -m bench.http_idle                  # 3 rounds of 20 s
    python -m bench.http_idle --quick          # 2 rounds of 5 s

Three daemons run side by side on three stores (a daemon locks its store), with the same
config and the same 50 completed Works: one plain, one serving the API on 127.0.0.1:0,
and, as the control that shows the measure can see a cost, one serving the API that the
bench scrapes (`/metrics`) once a second.
After a warm-up (both print `rota: running`, then 2 s), each round reads both processes'
CPU time (user + system, /proc/PID/stat) at its start and end, so both are measured over
the same wall-clock window and the machine's load falls on both alike. No request is sent
during a round: this is the cost of an idle API. The order the two are started in is
reversed every round so neither always starts
warmer. Reports CPU ms per wall second for each, the ratio http / plain and the control's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bench.common import print_header, workdir

CONFIG = """
[store]
url = "sqlite:///{store}"

[http]
tokens = "tokens.json"

[[bindings]]
name = "ok"
executor = "shell"
command = ["true"]
"""
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process's CPU time: the run time of each of its threads (/proc/PID/task/*/
    schedstat, nanoseconds; the clock-tick counts of /proc/PID/stat are 10 ms coarse).
    A thread that exited in the window would be missed: an idle daemon starts none."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def tick_seconds(pid: int) -> float:
    """utime + stime of /proc/PID/stat: coarse, but counts threads that exited."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rota(home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-P", "-m", "rota", *args],
        cwd=home,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def prepare(home: Path, works: int) -> str:
    """A store with `works` completed Works and a read token (returned)."""
    home.mkdir()
    (home / "rota.toml").write_text(CONFIG.format(store="rota.db"))
    token = rota(home, "token", "add", "bench", "--scope", "read").strip()
    for i in range(works):
        rota(home, "submit", f"w{i}", "--binding", "ok")
    rota(home, "run", "--until-idle", "--timeout", "120")
    return token


def scrape(url: str, token: str, stop: threading.Event) -> None:
    """The control: one /metrics scrape a second, so the bench shows it can see a cost."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while not stop.wait(1.0):
            client.get("/metrics").raise_for_status()


def start(home: Path, http: bool) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, "-P", "-m", "rota", "run"]
    if http:
        args += ["--http", "127.0.0.1:0"]
    process = subprocess.Popen(
        args, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    url = ""
    while not (line := process.stderr.readline()).startswith("rota: running"):
        if not line:
            raise SystemExit(f"rota run{' --http' if http else ''} did not start")
        if line.startswith("rota: http on "):
            url = line.split()[3]
    return process, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="one round's window")
    parser.add_argument("--works", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 s, 10 Works")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.works = 2, 5.0, 10
    results: dict[str, list[float]] = {"plain": [], "http": [], "scraped": []}
    with workdir(args.dir) as base:
        print_header("rota run idle CPU, with and without --http", base)
        print(f"{args.rounds} rounds of {args.seconds:.0f} s, {args.works} completed Works each")
        tokens = {name: prepare(base / name, args.works) for name in results}
        for round_ in range(args.rounds):
            order = list(results) if round_ % 2 == 0 else list(reversed(results))
            started = {name: start(base / name, name != "plain") for name in order}
            processes = {name: process for name, (process, _) in started.items()}
            stop = threading.Event()
            scraper = threading.Thread(
                target=scrape, args=(started["scraped"][1], tokens["scraped"], stop)
            )
            try:
                time.sleep(2.0)  # warm-up: imports done, first passes run
                scraper.start()
                before = {n: cpu_seconds(p.pid) for n, p in processes.items()}
                ticks = {n: tick_seconds(p.pid) for n, p in processes.items()}
                began = time.monotonic()
                time.sleep(args.seconds)
                wall = time.monotonic() - began
                after = {n: cpu_seconds(p.pid) for n, p in processes.items()}
                ticks = {n: tick_seconds(p.pid) - ticks[n] for n, p in processes.items()}
            finally:
                stop.set()
                if scraper.is_alive():
                    scraper.join(30)
                for process in processes.values():
                    process.terminate()
                for process in processes.values():
                    process.wait(30)
                    assert process.stderr is not None
                    process.stderr.close()
            line = []
            for name, rates in results.items():
                rate = (after[name] - before[name]) * 1000 / wall
                rates.append(rate)
                coarse = ticks[name] * 1000 / wall
                line.append(f"{name} {rate:6.2f} CPU ms/s ({coarse:.1f} by ticks)")
            print(f"round {round_ + 1} (started {' then '.join(order)}): " + ", ".join(line))
    plain, http, scraped = (sum(r) / len(r) for r in results.values())
    print(f"mean: plain {plain:.2f}, http {http:.2f}, scraped {scraped:.2f} CPU ms/s")
    ratio = http / plain if plain else float("inf")
    print(f"http / plain: {ratio:.2f}x")
    control = scraped / plain if plain else float("inf")
    print(f"control, http scraped once a second / plain: {control:.2f}x")


if __name__ == "__main__":
    main()
