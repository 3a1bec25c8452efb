"""Group commit of launch writes (issue 18 item 4): concurrent fenced phase writes share one
append; a refused write is refused to its caller alone; the log holds every other one."""

from __future__ import annotations

import threading
from pathlib import Path

import rota
from rota.domain import lifecycle
from rota.domain.errors import LeaseLost, Refusal

WORKS = 4


def test_queued_phase_writes_share_one_append_and_a_stale_one_is_refused_alone(
    tmp_path: Path,
) -> None:
    scheduler = rota.open(tmp_path / "log.db", config={"settings": {"concurrency": 8}})
    try:
        scheduler.register("job", lambda ctx: None)
        for k in range(WORKS):
            scheduler.submit(f"w{k}", binding="job", input={"k": k})
        commands = scheduler.service.lifecycle
        claimed = commands.start_pass(16).claimed
        assert len(claimed) == WORKS
        grouped = commands.grouped
        tx = scheduler.service.lifecycle.tx
        errors: dict[str, BaseException | None] = {}

        def write(execution_id: str, epoch: int) -> None:
            try:
                grouped.write(
                    execution_id,
                    lambda w, n, now: [lifecycle.begin_phase(w, n, epoch, now, "prepare")],
                )
                errors[execution_id] = None
            except Refusal as refusal:
                errors[execution_id] = refusal

        stale = claimed[0].attempt.execution_id
        writers = [
            threading.Thread(
                target=write,
                args=(c.attempt.execution_id, c.attempt.epoch + (c.attempt.execution_id == stale)),
            )
            for c in claimed
        ]
        head = scheduler.store.head().position
        with tx.lock:  # an append in progress: the writes queue up behind it
            for writer in writers:
                writer.start()
            while len(grouped._queue) < WORKS:
                writers[0].join(0.005)
        for writer in writers:
            writer.join(30)
        assert grouped.appends == 1 and grouped.writes == WORKS
        assert isinstance(errors.pop(stale), LeaseLost)
        assert set(errors.values()) == {None}
        new = scheduler.store.read(head)
        assert [e.type for e in new] == ["core.execution.phase_began"] * (WORKS - 1)
        assert len({e.position for e in new}) == WORKS - 1
    finally:
        scheduler.close()
