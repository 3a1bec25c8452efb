"""A fast generator of large logs: Works' whole lifecycles appended in big batches through
the real store API (`SQLiteStore.append`), for the memory and rebuild benchmarks.

A log built through `SchedulerService` runs at a few thousand Works per second; a million
Works would take minutes of building per run. Here one Work's lifecycle is recorded once
through the service (so the events, the pinned binding included, are exactly what rota
writes), then repeated for every Work with its id and positions substituted, 4,000 Works
(about 20,000 events) per append:
- `quiet` Works: submitted, input accepted, claimed (with a pool capacity claim per
  batch), invoked, completed: five events each, quiet afterwards;
- `active` Works: the same without the completion, their leases running a day past the
  build (so a daemon opening the store leaves them to their owner);
- then lease renewals of the active attempts (`core.execution.renewed`, as `renew_many`
  writes them), 20,000 per append, until the log holds `events` events.
The delivery identities are left out (nothing here is ever appended twice).

`cached(path, ...)` builds the log once and keeps it (with a `.json` of its counts) for the
next run with the same shape: a million-Work log is kept under /tmp, never in the repository.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from rota import bootstrap
from rota.application.ports import NewEvent
from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    CapacityClaimed,
    InputAccepted,
    LaunchInvoked,
    LeaseRenewed,
    WorkSubmitted,
)
from rota.domain.policy import Binding, Registration, Settings
from rota.domain.results import Result
from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.sqlite.store import SQLiteStore

GROUP = 4000  # Works per append
RENEW_BATCH = 20_000
LEASE = timedelta(days=1)


def template() -> dict[type, Any]:
    """One Work's lifecycle recorded through the service: its events by type."""
    with tempfile.TemporaryDirectory() as scratch:
        clock = ManualClock(datetime(2026, 11, 29, tzinfo=UTC))
        log = SQLiteStore(Path(scratch) / "t.db", clock=clock, synchronous="normal")
        service = bootstrap.build_service(
            log,
            settings=Settings(concurrency=4, lease_seconds=600),
            owner="bench",
            bindings={"noop": Binding(name="noop", executor="x", config={"command": ["true"]})},
            registrations={"x": Registration(name="x")},
        )
        service.lifecycle.submit_many(
            [SubmitWork(work_id="T", binding="noop", inputs=(WorkInput({"row": 0}),))]
        )
        claim = service.lifecycle.start_pass(limit=1).claimed[0]
        attempt = (claim.attempt.execution_id, claim.attempt.epoch)
        service.lifecycle.invoke_many([attempt])
        service.lifecycle.finish_many([(*attempt, Result(data={"rows": 1}))])
        found = {type(r.event): r.event for r in log.read(0, 100)}
        log.close()
    return found


def build(path: Path, quiet: int, active: int, events: int) -> dict[str, int]:
    """Write the log (see the module docstring) to a new file at `path`; its counts."""
    events_of = template()
    submitted, accepted = events_of[WorkSubmitted], events_of[InputAccepted]
    claimed, invoked = events_of[AttemptClaimed], events_of[LaunchInvoked]
    completed = events_of[AttemptCompleted]
    replace = msgspec.structs.replace
    log = SQLiteStore(path, synchronous="normal")
    expiry = datetime.now(UTC) + LEASE
    running: list[str] = []

    def group(ids: list[str], finish: bool) -> None:
        head = log.head().position
        batch = []
        for k, work_id in enumerate(ids):
            stream = "work/" + work_id
            batch.append(NewEvent(stream, replace(submitted, work_id=work_id)))
            batch.append(NewEvent(stream, replace(accepted, work_id=work_id, payload={"k": k})))
        for k, work_id in enumerate(ids):
            position = head + 2 * k + 2  # the input's
            claim = replace(
                claimed,
                work_id=work_id,
                consumed=[position],
                trigger=position,
                lease_expires_at=expiry,
                deadline=expiry,
            )
            batch.append(NewEvent("work/" + work_id, claim))
        executions = [f"{work_id}/1" for work_id in ids]
        batch.append(NewEvent("pool/agents", CapacityClaimed(pool="agents", executions=executions)))
        batch += [NewEvent("work/" + w, replace(invoked, work_id=w)) for w in ids]
        if finish:
            batch += [NewEvent("work/" + w, replace(completed, work_id=w)) for w in ids]
        log.append(batch)

    for first in range(0, quiet, GROUP):
        group([f"done-{k:07d}" for k in range(first, min(quiet, first + GROUP))], True)
    for first in range(0, active, GROUP):
        ids = [f"live-{k:07d}" for k in range(first, min(active, first + GROUP))]
        group(ids, False)
        running += ids
    head, turn = log.head().position, 0
    while head < events and running:
        batch = []
        for _ in range(min(RENEW_BATCH, events - head)):
            work_id = running[turn % len(running)]
            turn += 1
            renewed = LeaseRenewed(work_id=work_id, attempt=1, epoch=1, lease_expires_at=expiry)
            batch.append(NewEvent("work/" + work_id, renewed))
        head += log.append(batch).written
    counts = {"events": log.head().position, "quiet": quiet, "active": active}
    log.close()
    return counts


def cached(path: Path, quiet: int, active: int, events: int = 0) -> dict[str, int]:
    """The log at `path` if it was built with this shape (its `.json` says so), else built
    now; its counts."""
    shape = {"quiet": quiet, "active": active, "events": events}
    marker = Path(f"{path}.json")
    if path.exists() and marker.exists():
        found = json.loads(marker.read_text())
        if found.get("shape") == shape:
            counts: dict[str, int] = found["counts"]
            return counts
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), marker):
        stale.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = build(path, quiet, active, events)
    marker.write_text(json.dumps({"shape": shape, "counts": counts}))
    return counts


__all__ = ["build", "cached", "template"]
