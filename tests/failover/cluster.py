"""A primary and a streaming replica on this machine, for the failover drills: two
PostgreSQL clusters (`initdb` into a temporary directory, never the shared server), driven
by hand as Patroni would drive them.

- `Cluster.start()`: one `initdb` (a template copied for each node), node `a` started as
  the primary, node `b` a replica cloned from it (`pg_basebackup -R -X stream`), streaming
  from it; `cut_replication()` stops that (the primary's `pg_hba.conf` rejects replication
  and its WAL senders are ended): the replica receives nothing more, so a promotion loses
  what it had not received;
- `synchronous(on)`: `synchronous_standby_names='*'` on the primary (only ever there: a
  replica promoted alone would wait for ever);
- a node can `stop` (fast: its sessions get 57P01), `kill` (SIGKILL of the postmaster and
  its children), `start`, `promote` (`pg_promote`), be made `read_only` on the fly
  (`default_transaction_read_only` + reload: open sessions get 25006 on their next write),
  and be rewound onto the new primary as its replica (`rewind`: `pg_rewind -R`, then start);
- `destroy()` kills every node and removes the directory, and `sweep()` removes what a
  killed run left behind (directories carry the pid of the run that made them).

Ports are free ports of 127.0.0.1; nodes also listen on a Unix socket in their own
directory. `fsync=off` (drills kill processes, never the machine) unless asked. Run as root,
every server command runs as `postgres` (`runuser`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

PREFIX = "rota-failover-"
REJECT = "host replication all 127.0.0.1/32 reject  # cut_replication"
CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
fsync = {fsync}
synchronous_commit = on
wal_level = replica
wal_log_hints = on
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = '256MB'
hot_standby = on
wal_receiver_status_interval = '1s'
wal_retrieve_retry_interval = '1s'
shared_buffers = '16MB'
max_connections = 100
log_min_messages = warning
log_line_prefix = '%m [%p] '
"""


class ClusterError(RuntimeError):
    pass


def pg_bin() -> Path | None:
    """The PostgreSQL server binaries (`ROTA_PG_BIN`, else the newest Debian version's)."""
    named = os.environ.get("ROTA_PG_BIN")
    if named:
        return Path(named)
    root = Path("/usr/lib/postgresql")
    found = sorted(
        (p for p in root.glob("*/bin") if (p / "initdb").exists() and (p / "pg_rewind").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


def missing() -> str | None:
    """Why drills cannot run here, or None."""
    binaries = pg_bin()
    if binaries is None:
        return "no PostgreSQL server binaries (initdb, pg_rewind): set ROTA_PG_BIN"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server(command: Sequence[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)


def _run(command: Sequence[str], timeout: float = 120) -> str:
    done = subprocess.run(
        _as_server(command),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise ClusterError(f"{' '.join(command)}: {done.returncode}: {done.stderr.strip()}")
    return done.stdout + done.stderr


def _give_to_server(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


class Node:
    """One PostgreSQL cluster (see the module docstring)."""

    def __init__(self, name: str, root: Path, binaries: Path) -> None:
        self.name = name
        self.data = root / name
        self.log = root / f"{name}.log"
        self.sockets = root / "sockets"
        self.port = free_port()
        self._bin = binaries

    def __repr__(self) -> str:
        return f"Node({self.name}, port {self.port})"

    def configure(self, fsync: bool) -> None:
        """This node's settings, last in its files (a clone or a rewind copied the other
        node's): its port, and no role-specific setting of the node it was copied from."""
        conf = CONF.format(port=self.port, sockets=self.sockets, fsync="on" if fsync else "off")
        with (self.data / "postgresql.conf").open("a") as out:
            out.write(conf)
        hba = self.data / "pg_hba.conf"  # no replication cut it was copied with
        hba.write_text(
            "".join(line for line in hba.read_text().splitlines(True) if line.strip() != REJECT)
        )
        auto = self.data / "postgresql.auto.conf"
        if auto.exists():
            kept = [
                line
                for line in auto.read_text().splitlines()
                if not line.startswith(("synchronous_standby_names", "default_transaction_read"))
            ]
            auto.write_text("\n".join(kept) + "\n")

    def start(self) -> None:
        if not self.log.exists():
            self.log.touch()
            _give_to_server(self.log)
        try:
            _run([str(self._bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "60", "start"])  # fmt: skip
        except ClusterError as exc:
            tail = self.log.read_text(errors="replace").splitlines()[-8:]
            raise ClusterError(f"{exc}\n{self.log}:\n" + "\n".join(tail)) from None

    def stop(self, mode: str = "fast") -> None:
        _run([str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    @property
    def running(self) -> bool:
        pid = self.postmaster_pid()
        return pid is not None and _alive(pid)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every child (an unplanned failure of the node)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        victims = [pid, *_children(pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while any(_alive(v) for v in victims):
            if time.monotonic() > deadline:
                raise ClusterError(f"{self} survived SIGKILL")
            time.sleep(0.02)
        # Dead, maybe a zombie nobody reaps yet (a container's init may be slow to): its pid
        # would still pass PostgreSQL's own check that the lock file's postmaster is gone.
        for lock in (
            self.data / "postmaster.pid",
            self.sockets / f".s.PGSQL.{self.port}.lock",
            self.sockets / f".s.PGSQL.{self.port}",
        ):
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.conninfo(), autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(statement.encode(), params)
            return cursor.fetchall() if cursor.description else []

    def recovering(self) -> bool:
        return bool(self.sql("SELECT pg_is_in_recovery()")[0][0])

    def promote(self) -> None:
        assert self.sql("SELECT pg_promote(true, 60)")[0][0], f"{self} did not promote"

    def set(self, name: str, value: str) -> None:
        self.sql(f"ALTER SYSTEM SET {name} = '{value}'")
        self.sql("SELECT pg_reload_conf()")

    def read_only(self, on: bool) -> None:
        """Every session's next transaction is read-only (as a demoted leader's are)."""
        self.set("default_transaction_read_only", "on" if on else "off")
        deadline = time.monotonic() + 10
        want = "on" if on else "off"
        while self.sql("SHOW default_transaction_read_only")[0][0] != want:
            assert time.monotonic() < deadline, "the reload never took"
            time.sleep(0.02)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Cluster:
    """Two nodes and their directory."""

    def __init__(self, *, fsync: bool = False) -> None:
        binaries = pg_bin()
        assert binaries is not None, missing()
        self._bin = binaries
        self.fsync = fsync
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        os.chmod(self.root, 0o755)
        _give_to_server(self.root)
        (self.root / "sockets").mkdir()
        _give_to_server(self.root / "sockets")
        self.a = Node("a", self.root, binaries)
        self.b = Node("b", self.root, binaries)
        self.rewound = ""  # what the last pg_rewind said
        self.primary, self.replica = self.a, self.b

    def start(self) -> None:
        template = self.root / "template"
        template.mkdir()
        _give_to_server(template)
        _run([str(self._bin / "initdb"), "-D", str(template), "-A", "trust", "-U", "postgres",
              "--no-sync", "-E", "UTF8", "--locale=C"])  # fmt: skip
        _run(["cp", "-a", str(template), str(self.a.data)])
        self.a.configure(self.fsync)
        self.a.start()
        self.clone(self.b)

    def clone(self, node: Node) -> None:
        """Make `node` a fresh replica of the primary (a base backup)."""
        if node.running:
            node.stop("immediate")
        shutil.rmtree(node.data, ignore_errors=True)
        _run([str(self._bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary.port),
              "-U", "postgres", "-D", str(node.data), "-R", "-X", "stream", "-c", "fast",
              "--no-sync"])  # fmt: skip
        node.configure(self.fsync)
        node.start()
        self.replica = node
        self.wait_streaming()

    def wait_streaming(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            rows = self.primary.sql("SELECT state FROM pg_stat_replication")
            if rows and rows[0][0] == "streaming":
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"the replica never streamed ({rows})")
            time.sleep(0.05)

    def caught_up(self, timeout: float = 30) -> None:
        """Wait until the replica replayed everything the primary wrote so far."""
        target = self.primary.sql("SELECT pg_current_wal_lsn()")[0][0]
        deadline = time.monotonic() + timeout
        while True:
            replayed = self.replica.sql(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (str(target),)
            )[0][0]
            if replayed:
                return
            if time.monotonic() > deadline:
                raise ClusterError("the replica never caught up")
            time.sleep(0.02)

    def synchronous(self, on: bool) -> None:
        """Synchronous replication on the primary: a commit waits for the replica's flush."""
        self.primary.set("synchronous_standby_names", "*" if on else "")
        if on:
            deadline = time.monotonic() + 30
            while self.primary.sql("SELECT sync_state FROM pg_stat_replication") != [("sync",)]:
                assert time.monotonic() < deadline, "the replica never became synchronous"
                time.sleep(0.05)

    def cut_replication(self) -> None:
        """The replica receives nothing more (its stream ended, reconnecting in vain): the
        primary rejects replication connections and ends its WAL senders."""
        hba = self.primary.data / "pg_hba.conf"
        hba.write_text(f"{REJECT}\n{hba.read_text()}")
        self.primary.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while self.primary.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication")[
            0
        ][0]:
            assert time.monotonic() < deadline, "the WAL sender never ended"
            time.sleep(0.05)

    def swap(self) -> None:
        """After a promotion of the replica: it is the primary, the old primary has no role."""
        self.primary, self.replica = self.replica, self.primary

    def rewind(self, node: Node) -> None:
        """Make the stopped old primary `node` a replica of the primary: `pg_rewind` (it
        discards what the node wrote that the primary lacks), streaming from the primary."""
        assert not node.running
        # (a node that was killed is first recovered by pg_rewind itself, in single-user mode)
        # A newly promoted primary's control file names its new timeline only after a
        # checkpoint: without one pg_rewind sees one timeline and rewinds nothing.
        self.primary.sql("CHECKPOINT")
        source = f"host=127.0.0.1 port={self.primary.port} user=postgres dbname=postgres"
        self.rewound = _run([str(self._bin / "pg_rewind"), "-D", str(node.data),
                             f"--source-server={source}", "-R", "--no-sync"])  # fmt: skip
        node.configure(self.fsync)
        node.start()
        self.replica = node
        self.wait_streaming()

    def destroy(self) -> None:
        for node in (self.a, self.b):
            with contextlib.suppress(Exception):
                node.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def cluster(*, fsync: bool = False) -> Iterator[Cluster]:
    """A started primary and replica, destroyed afterwards whatever happens."""
    sweep()
    made = Cluster(fsync=fsync)
    try:
        made.start()
        yield made
    finally:
        made.destroy()


def sweep() -> None:
    """Kill and remove the clusters of runs that no longer exist (a killed test run)."""
    for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            pid = int(root.name[len(PREFIX) :].split("-")[0])
        except ValueError:
            continue
        if _alive(pid):
            continue
        for name in ("a", "b"):
            postmaster = root / name / "postmaster.pid"
            with contextlib.suppress(OSError, ValueError, IndexError, ProcessLookupError):
                os.kill(int(postmaster.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
