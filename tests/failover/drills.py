"""The failover drills: each injects one fault into a running rig (`rig.Rig`: two `rota run`
daemons behind the proxy, a client submitting) and returns when rota started Work again,
with the seconds from the fault to that first new start (the time a drill reports).

- `database_down_at_start`: the daemons start while nothing answers behind the address;
  they wait (no exit) and start Work once the primary is reachable;
- `planned_switchover`: synchronous replication, the primary shut down cleanly (its
  sessions get 57P01), the replica promoted, the address moved; the old primary rewound
  (`pg_rewind`) and back as the replica;
- `unplanned_failover`: synchronous replication, the primary SIGKILLed, the replica
  promoted, the address moved; the old primary rewound;
- `role_flip`: the Aurora-style flip: the primary turns read-only while every socket to it
  stays open (25006 on the next write), the replica is promoted and the address moved,
  nothing closed (river#1225);
- `half_open`: every open connection stops being answered, sockets kept (a dead route, a
  frozen server); new connections are served;
- `long_outage`: nothing answers for longer than a lease (connections dropped, new ones
  closed at once), then the same primary is back;
- `lagging_replica`: asynchronous replication with the replica's stream cut: acknowledged
  Works the replica never received; the primary SIGKILLed, the replica promoted, the address
  moved. The daemons must report `log_regressed` with the missing positions before any new
  write (the new primary's log must not move), `/readyz` 503; then the lost events are
  put back from the old primary (started on its own: `rota export --from`, `rota import
  --append`) and the daemons go on by themselves.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from .rig import Rig, rota_cli, until


@dataclass
class Drill:
    """One drill's figures."""

    name: str
    to_first_start: float  # seconds from the fault (or the database's return) to a start
    notes: list[str] = field(default_factory=list)
    each: dict[int, float] = field(default_factory=dict)  # the first start of each daemon

    def line(self, lease: float) -> str:
        leases = self.to_first_start / lease
        extra = f"; {'; '.join(self.notes)}" if self.notes else ""
        each = ", ".join(f"daemon {i} {s:.2f} s" for i, s in sorted(self.each.items()))
        return (
            f"{self.name}: first new start {self.to_first_start:.2f} s after the fault "
            f"({leases:.2f} leases of {lease:g} s; {each}){extra}"
        )


def _timed(rig: Rig, name: str, moment: float, notes: list[str]) -> Drill:
    """The drill's figures: the first start after `moment`, and each daemon's."""
    took = rig.first_start_after(moment)
    each = rig.each_started(moment, within=2 * rig.lease)
    return Drill(name, took, notes, each)


def database_down_at_start(rig: Rig) -> Drill:
    """(Called before the daemons start: the proxy points nowhere.)"""
    rig.proxy.point(None)
    rig.start_daemons(wait=False)
    until(
        lambda: all(d.said("waiting for the store") for d in rig.daemons),
        "both daemons saying they wait for the store",
    )
    said = time.time()
    until(lambda: time.time() - said >= 1.0, "a second more down", 5, step=0.1)
    assert all(d.alive() for d in rig.daemons), "a daemon exited instead of waiting"
    lines = [len(d.said("waiting for the store")) for d in rig.daemons]
    back = time.time()
    rig.proxy.point(rig.cluster.primary.port)
    until(lambda: all(d.running() for d in rig.daemons), "both daemons running")
    opened = [d.said("store opened after") for d in rig.daemons]
    return _timed(
        rig,
        "database down at daemon start",
        back,
        [
            f"nothing answered for {back - said:.1f} s after both said they wait ({lines} "
            f"lines said so), then each opened the store: "
            + "; ".join(str(o[0]["message"]) for o in opened if o)
        ],
    )


def _promote_and_move(rig: Rig) -> float:
    """Promote the replica and point the address at it; when it was ready (time.time)."""
    cluster = rig.cluster
    cluster.replica.promote()
    cluster.swap()
    rig.proxy.point(cluster.primary.port)
    return time.time()


def _back_as_replica(rig: Rig) -> None:
    """The old primary, stopped, rewound onto the new one and streaming from it; then
    synchronous replication again."""
    cluster = rig.cluster
    old = cluster.a if cluster.primary is cluster.b else cluster.b
    if old.running:
        old.stop("fast")
    cluster.rewind(old)
    cluster.synchronous(True)


def planned_switchover(rig: Rig) -> Drill:
    cluster = rig.cluster
    cluster.caught_up()
    cluster.primary.stop("fast")
    fault = time.time()  # the old primary is down (a claim before could still be its)
    ready = _promote_and_move(rig)
    result = _timed(
        rig, "planned switchover", fault, [f"promoted {ready - fault:.2f} s after the stop"]
    )
    _back_as_replica(rig)
    return result


def unplanned_failover(rig: Rig) -> Drill:
    cluster = rig.cluster
    cluster.primary.kill()
    fault = time.time()  # every process of the old primary is dead
    ready = _promote_and_move(rig)
    result = _timed(
        rig,
        "unplanned failover (synchronous replication)",
        fault,
        [f"promoted {ready - fault:.2f} s after the SIGKILL"],
    )
    _back_as_replica(rig)
    return result


def role_flip(rig: Rig) -> Drill:
    cluster = rig.cluster
    old = cluster.primary
    before = rig.proxy.open_links(old.port)
    fault = time.time()
    old.read_only(True)  # every open session's next transaction: read-only (25006)
    flipped = time.time()
    ready = _promote_and_move(rig)  # the proxy closes nothing: open sockets stay on `old`
    # Timed from the new primary's readiness: a transaction begun before the flip may
    # still commit on the old primary just after it.
    result = _timed(
        rig,
        "role flip without closed sockets",
        ready,
        [
            f"read-only {flipped - fault:.2f} s after the ALTER SYSTEM; the replica promoted "
            f"and the address moved {ready - flipped:.2f} s later; time is from then",
            f"{before} sockets open to the old primary when it turned read-only, none closed "
            f"by the flip (the proxy closes nothing); {rig.proxy.open_links(old.port)} still "
            "open to it once both daemons had started Work on the new primary",
        ],
    )
    old.read_only(False)
    _back_as_replica(rig)
    return result


def half_open(rig: Rig) -> Drill:
    fault, began = time.time(), time.monotonic()
    frozen = rig.proxy.freeze()
    result = _timed(rig, "half-open connections", fault, [])
    until(  # each connection stuck in a wait is dropped after reply_timeout; idle ones later
        lambda: sum(link.given_up is not None for link in frozen) * 2 >= len(frozen),
        "rota giving up on the frozen connections",
    )
    dropped = sorted(link.given_up - began for link in frozen if link.given_up is not None)
    result.notes.append(
        f"{len(frozen)} connections stopped answering; new connections were served, so passes "
        f"went on; rota dropped {len(dropped)} of the frozen ones, the first "
        f"{dropped[0]:.2f} s after the freeze (reply_timeout {rig.reply:g} s)"
    )
    return result


def long_outage(rig: Rig) -> Drill:
    outage = 1.5 * rig.lease
    began = time.time()
    rig.proxy.point(None)
    rig.proxy.cut()
    until(lambda: time.time() - began >= outage, "the outage's end", outage + 5, step=0.1)
    back = time.time()
    rig.proxy.point(rig.cluster.primary.port)
    return _timed(
        rig,
        "outage longer than the lease",
        back,
        [
            f"nothing answered for {back - began:.1f} s ({(back - began) / rig.lease:.1f} "
            "leases); time is from the database's return"
        ],
    )


def lagging_replica(rig: Rig, *, lost: int) -> Drill:
    """See the module docstring; `lost`: Works acknowledged after the stream was cut."""
    cluster, client = rig.cluster, rig.client
    assert client is not None
    cluster.synchronous(False)
    cluster.caught_up()
    cluster.cut_replication()
    client.submit(lost)  # acknowledged by the primary alone
    old = cluster.primary
    unseen = client.told[-lost:]
    # The daemons see them (they claim them) before the primary dies.
    until(
        lambda: (
            old.sql(
                "SELECT count(DISTINCT data::json->>'work_id') FROM rota.events "
                "WHERE type = 'core.execution.claimed' AND data::json->>'work_id' = ANY(%s)",
                (unseen,),
            )[0][0]
            == len(unseen)
        ),
        "claims of the Works the replica lacks",
    )
    fault = time.time()
    old.kill()
    cluster.replica.promote()
    cluster.swap()
    new = cluster.primary
    head = new.sql("SELECT position FROM rota.head")[0][0]
    rig.proxy.point(new.port)
    # Every daemon says which positions are missing, and writes nothing.
    pattern = re.compile(r"positions (\d+)\.\.(\d+) \((\d+) events")
    reports = until(
        lambda: (
            [d.said("log_regressed", after=fault) for d in rig.daemons]
            if all(d.said("log_regressed", after=fault) for d in rig.daemons)
            else None
        ),
        "both daemons reporting log_regressed",
    )
    detected = time.time()
    missing = []
    for said in reports:
        found = pattern.search(str(said[0]["message"]))
        assert found, said[0]["message"]
        missing.append((int(found.group(1)), int(found.group(2))))
    assert rig.daemons[0].readyz(rig.token) == 503
    assert new.sql("SELECT position FROM rota.head")[0][0] == head, "a write after the loss"
    # Restore: the old primary, on its own (the address never reaches it), gives them back.
    old.start()
    acknowledged = old.sql("SELECT position FROM rota.head")[0][0]  # all it committed
    for first, last in missing:  # what each daemon saw of it, from where the new log ends
        assert first == head + 1 and head < last <= acknowledged, (first, last, head)
    tail = rig.home / "tail.jsonl"
    exported = rota_cli(
        rig.home, "--store", rig.node_url(old.port), "export", "--from", str(head),
        "--out", str(tail), "--json",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert new.sql("SELECT position FROM rota.head")[0][0] == head, "a write after the loss"
    restored_at = time.time()
    appended = rota_cli(rig.home, "--store", rig.node_url(new.port), "import", "--append",
                        str(tail), "--json")  # fmt: skip
    assert appended.returncode == 0, appended.stderr
    result = _timed(rig, "asynchronous replication, lagging replica", restored_at, [])
    old.stop("fast")
    _back_as_replica(rig)
    result.notes.extend(
        [
            f"the promoted replica ended at position {head}, the old primary at "
            f"{acknowledged}; {acknowledged - head} acknowledged events missing",
            f"log_regressed reported by both daemons {detected - fault:.2f} s after the "
            f"SIGKILL, naming positions {missing}, before any write (head stayed {head})",
            "time is from the restore (rota import --append) to the first start",
        ]
    )
    return result
