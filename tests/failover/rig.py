"""What a failover drill runs against: a primary and a replica (`cluster`), the proxy rota
connects through (`proxy`), two `rota run` daemons running shell jobs and a schedule, and a
client that submits Work and remembers what it was told.

- `Rig.start_daemons()`: two real `rota run` processes (the first with `--http`, for
  `/readyz`), JSON logs to files the drill reads (`Daemon.records`);
- `Client`: an embedded scheduler in the test process that runs no pass, submitting Works
  (`w-00000`, ...) from a thread at a pace; a submit that fails is retried, with the same
  Work id (its input's delivery identity makes a repeat a no-op), until acknowledged.
  `told` is every Work id whose submit returned;
- `Rig.verify()`: what the log holds against what the client was told and what the jobs
  did, read from the log alone (`Tally`): every acknowledged Work once, each completed
  once, each job run once (the effects file), one attempt each, schedule fires unique and
  each run once, delivery identities unique, no second live attempt, no pool overrun
  (`integration.invariants.check_log`), the chain verified, `rota doctor` ok.

Times are wall-clock (`time.time()`): the database's clock is this machine's, so an event's
`recorded_at` and a fault's moment compare directly (`first_start_after`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from integration.invariants import check_log

import rota
from rota.application.ports import RecordedEvent
from rota.application.timestamps import parse_timestamp
from rota.domain.errors import RotaError
from rota.infrastructure.stores import open_store
from rota.replay.audit import verify_chain

from .cluster import Cluster
from .proxy import Proxy

CONFIG = """
[store]
url = "{url}"
reply_timeout = {reply}

[settings]
lease_seconds = {lease}
concurrency = 16
job_concurrency = 16

[audit]
checkpoint_dir = "{home}/checkpoints"
every_events = 1
every_seconds = 1

[http]
tokens = "{home}/tokens.json"

[[bindings]]
name = "job"
executor = "shell"
command = ["sh", "-c", "echo \\"$ROTA_WORK_ID $ROTA_ATTEMPT\\" >> {effects}; sleep {sleep}"]

[[schedules]]
name = "tick"
binding = "job"
every = "1s"
overlap = "allow_all"
catchup = "all"
catchup_window = "10m"
"""
SCHEMA = "rota"
JOBS = 16  # the jobs pool's limit, across both daemons


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROTA_STORE", "ROTA_CONFIG")}
    env["TMPDIR"] = str(home / "runs")  # both daemons' shell runs: each can adopt the other's
    return env


def rota_cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "rota", "--config", str(home / "rota.toml"), *args],
        cwd=home,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def until(check: Callable[[], Any], what: str, timeout: float = 60.0, step: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    pace = threading.Event()  # never set: its timed wait paces the polls
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        pace.wait(step)


class Daemon:
    """One `rota run` process and its JSON log."""

    def __init__(self, home: Path, index: int, *, http: bool) -> None:
        self.home, self.index = home, index
        self.log_path = home / f"daemon-{index}.log"
        args = ["run", "--log-format", "json"] + (["--http", "127.0.0.1:0"] if http else [])
        self._stderr = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "rota", "--config", str(home / "rota.toml"), *args],
            cwd=home,
            env=cli_env(home),
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.pid = self.process.pid
        self.http = http
        self.url: str | None = None

    def records(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    found.append(record)
        return found

    def said(self, text: str, after: float = 0.0) -> list[dict[str, Any]]:
        """Its records whose message contains `text`, logged at or after `after` (time.time)."""
        return [
            r
            for r in self.records()
            if text in str(r.get("message", "")) and _when(r) >= after - 0.001
        ]

    def alive(self) -> bool:
        return self.process.poll() is None

    def running(self) -> bool:
        return bool(self.said("running"))

    def readyz(self, token: str) -> int:
        if self.url is None:
            listening = self.said("http listening")
            assert listening, "the daemon never said where it listens"
            self.url = str(listening[0]["url"])
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def stop(self) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        self._stderr.close()
        return code


def _when(record: dict[str, Any]) -> float:
    stamp = record.get("time") or record.get("timestamp") or ""
    try:
        return parse_timestamp(str(stamp)).timestamp()
    except ValueError:
        return 0.0


class Client:
    """Submits Works from a thread, each retried until acknowledged (see the module)."""

    def __init__(self, url: str, config: Path) -> None:
        self.scheduler = rota.open(url, config=config, projections=False)
        self.told: list[str] = []  # acknowledged, in order
        self.refusals: Counter[str] = Counter()  # submits that failed (then retried), by code
        self.next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pace = 0.1

    def submit(self, count: int = 1) -> None:
        """Submit `count` Works now, each retried until acknowledged."""
        for _ in range(count):
            self._one()

    def _one(self) -> None:
        work_id = f"w-{self.next:05d}"
        self.next += 1
        while True:
            try:
                self.scheduler.submit(work_id, binding="job", input={"n": work_id})
            except RotaError as exc:
                self.refusals[str(exc.code)] += 1
                if self._stop.wait(0.2):
                    self._stop.clear()  # stopping: finish this one anyway (told or not)
                continue
            self.told.append(work_id)
            return

    def start(self, pace: float) -> None:
        self.pace = pace
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._one()
            self._stop.wait(self.pace)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
            assert not self._thread.is_alive(), "the client's last submit never returned"
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.scheduler.close()


@dataclass
class Tally:
    """What the log holds, counted (see `Rig.verify`)."""

    works: int = 0
    told: int = 0
    attempts: int = 0
    fires: int = 0
    completed: int = 0
    runs: int = 0
    deliveries: int = 0
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"works {self.works} (told {self.told}), attempts {self.attempts}, fires "
            f"{self.fires}, completed {self.completed}, job runs {self.runs}, delivery "
            f"identities {self.deliveries}; lost {len(self.lost)}, doubled {len(self.doubled)}"
        )


class Rig:
    """The cluster, the proxy in front of it, two daemons and a client (see the module)."""

    def __init__(self, cluster: Cluster, home: Path, *, lease: float, reply: float) -> None:
        self.cluster, self.home, self.lease, self.reply = cluster, home, lease, reply
        self.proxy = Proxy(cluster.primary.port)
        self.url = (
            f"postgresql://postgres@127.0.0.1:{self.proxy.port}/postgres?schema={SCHEMA}"
            "&connect_timeout=3"
        )
        self.effects = home / "effects.log"
        (home / "runs").mkdir(exist_ok=True)
        (home / "checkpoints").mkdir(exist_ok=True)
        (home / "rota.toml").write_text(
            CONFIG.format(
                url=self.url, home=home, effects=self.effects, lease=lease, reply=reply, sleep=0.4
            )
        )
        added = rota_cli(home, "token", "add", "ops", "--json")
        assert added.returncode == 0, added.stderr
        self.token = str(json.loads(added.stdout)["token"])
        self.daemons: list[Daemon] = []
        self.client: Client | None = None
        self.starts: dict[int, float] = {}  # the last first_start_after, per daemon

    def start_daemons(self, *, wait: bool = True) -> None:
        self.daemons = [Daemon(self.home, 0, http=True), Daemon(self.home, 1, http=False)]
        if wait:
            until(lambda: all(d.running() for d in self.daemons), "both daemons running")

    def open_client(self) -> Client:
        self.client = Client(self.url, self.home / "rota.toml")
        return self.client

    def node_url(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/postgres?schema={SCHEMA}"

    def head_on(self, port: int) -> int:
        with open_store(self.node_url(port), create=False) as store:
            return store.head().position

    def pids(self) -> list[int]:
        return [d.pid for d in self.daemons]

    def assert_no_restart(self, pids: list[int]) -> None:
        assert self.pids() == pids and all(d.alive() for d in self.daemons), (
            "a daemon exited: "
            + "; ".join(d.log_path.read_text()[-2000:] for d in self.daemons if not d.alive())
        )

    def first_start_after(self, moment: float, timeout: float = 120.0) -> float:
        """Seconds from `moment` (time.time) to the first attempt claimed after it; also
        kept per daemon in `starts` (the first start of each once both have started, else
        of the one that has)."""
        pids = {str(d.pid): d.index for d in self.daemons}

        def found() -> tuple[float] | None:
            with open_store(self.node_url(self.cluster.primary.port), create=False) as store:
                claims = [
                    (e.recorded_time.timestamp(), e.event.owner)  # type: ignore[attr-defined]
                    for e in _all(store)
                    if e.type == "core.execution.claimed" and e.recorded_time.timestamp() >= moment
                ]
            if not claims:
                return None
            firsts: dict[int, float] = {}
            for when, owner in sorted(claims):
                index = pids.get(owner.split(":")[1]) if owner.count(":") >= 2 else None
                if index is not None:
                    firsts.setdefault(index, when - moment)
            self.starts = firsts
            return (min(claims)[0] - moment,)

        return float(until(found, "a new start after the fault", timeout, step=0.2)[0])

    def each_started(self, moment: float, within: float) -> dict[int, float]:
        """The first start after `moment` of each daemon that started Work within `within`
        seconds of it (waiting that long at most for the other: one daemon can take all the
        ready Work while the other finds none)."""

        def both() -> bool:
            self.first_start_after(moment)
            return len(self.starts) == len(self.daemons) or time.time() > moment + within

        until(both, "the daemons starting Work again", within + 30, step=0.2)
        return dict(self.starts)

    def drain(self, timeout: float = 120.0) -> None:
        """Wait until every Work the client was told about has completed."""
        assert self.client is not None
        told = set(self.client.told)

        def done() -> bool:
            with open_store(self.node_url(self.cluster.primary.port), create=False) as store:
                finished = {
                    e.event.work_id  # type: ignore[attr-defined]
                    for e in _all(store)
                    if e.type == "core.execution.completed"
                }
            return told <= finished

        until(done, f"the {len(told)} Works told to complete", timeout, step=0.25)

    def verify(self) -> Tally:
        """Count the log against what the client was told and what the jobs did."""
        assert self.client is not None
        tally = Tally(told=len(self.client.told))
        url = self.node_url(self.cluster.primary.port)
        with open_store(url, create=False) as store:
            assert verify_chain(store).ok
            check_log(store, {"jobs": JOBS})
            events = _all(store)
        submitted = Counter(
            e.event.work_id  # type: ignore[attr-defined]
            for e in events
            if e.type == "core.work.submitted"
        )
        claimed = Counter(
            e.event.work_id  # type: ignore[attr-defined]
            for e in events
            if e.type == "core.execution.claimed"
        )
        completed = Counter(
            e.event.work_id  # type: ignore[attr-defined]
            for e in events
            if e.type == "core.execution.completed"
        )
        fires = [e for e in events if e.type == "core.schedule.fired"]
        deliveries = Counter(e.delivery_id for e in events if e.delivery_id is not None)
        runs = Counter(
            line.split()[0] for line in self.effects.read_text().splitlines() if line.strip()
        )
        tally.works, tally.attempts, tally.fires = len(submitted), sum(claimed.values()), len(fires)
        tally.completed, tally.runs = sum(completed.values()), sum(runs.values())
        tally.deliveries = len(deliveries)
        for work_id in self.client.told:
            if submitted[work_id] != 1 or completed[work_id] != 1 or runs[work_id] != 1:
                (tally.lost if not completed[work_id] else tally.doubled).append(work_id)
        for work_id in submitted:
            if claimed[work_id] > 1 or completed[work_id] > 1 or runs[work_id] > 1:
                tally.doubled.append(work_id)
            elif completed[work_id] and not runs[work_id]:
                tally.lost.append(f"unrun:{work_id}")  # completed, yet its job never ran
        doubled_ids = [d for d, n in deliveries.items() if n > 1]
        tally.doubled.extend(doubled_ids)
        fired = Counter(e.delivery_id for e in fires)
        tally.doubled.extend(d for d, n in fired.items() if d is None or n > 1)
        unknown = set(submitted) - set(self.client.told)
        phantom = [w for w in unknown if not w.startswith("schedule")]
        tally.lost.extend(f"unasked:{w}" for w in phantom)  # a Work nobody asked for
        doctor = rota_cli(self.home, "--store", url, "doctor", "--json")
        report = json.loads(doctor.stdout)
        failing = [c for c in report["checks"] if c["status"] == "fail"]
        assert report["ok"] and not failing, failing
        return tally


def _all(store: Any) -> list[RecordedEvent]:
    found: list[RecordedEvent] = []
    position = 0
    while batch := store.read(position, 5000):
        found.extend(batch)
        position = batch[-1].position
    return found


@contextlib.contextmanager
def rig(cluster: Cluster, home: Path, *, lease: float, reply: float) -> Iterator[Rig]:
    made = Rig(cluster, home, lease=lease, reply=reply)
    try:
        yield made
    finally:
        if made.client is not None:
            with contextlib.suppress(Exception):
                made.client.close()
        for daemon in made.daemons:
            with contextlib.suppress(Exception):
                daemon.stop()
        made.proxy.stop()
