"""A batch of shell launches (`ShellExecutor.launch_many`): every wrapper asked for first,
one `persist` for the batch, a launch refused there failing alone with nothing started."""

from __future__ import annotations

import queue
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rota.application.errors import ExecutorError
from rota.application.ports import Launch, LaunchContext
from rota.domain.errors import LeaseLost
from rota.domain.results import Result
from rota.infrastructure.executors.shell import ShellExecutor

from .test_shell_executor import WAIT, make_context, running


def test_a_batch_pins_every_launch_in_one_persist_and_a_refused_one_fails_alone(
    tmp_path: Path,
) -> None:
    runs, marks = tmp_path / "runs", tmp_path / "marks"
    marks.mkdir()
    shell = ShellExecutor(runs)
    results: queue.Queue[tuple[int, Result]] = queue.Queue()
    items = []
    for n in range(4):
        command = ["sh", "-c", f'echo {n} > "$1"', "sh", str(marks / str(n))]
        ctx, _, _ = make_context({"command": command})
        ctx.work_id = f"w-{n}"
        items.append(Launch(ctx, lambda result, n=n: results.put((n, result))))
    bad, _, _ = make_context({"command": "not a list"})
    items.append(Launch(bad, lambda result: None))
    calls: list[list[dict[str, Any]]] = []

    def persist(pairs: Sequence[tuple[LaunchContext, Any]]) -> list[BaseException | None]:
        calls.append([metadata for _, metadata in pairs])
        for ctx, _ in pairs:
            ctx.recovery_persisted = True
        return [LeaseLost("gone") if ctx.work_id == "w-2" else None for ctx, _ in pairs]

    try:
        shell.launch_many(items, persist)
        [pinned] = calls  # one persist for the batch, the bad config never asked
        assert len(pinned) == 4 and all(m["hold"] is True for m in pinned)
        assert isinstance(items[2].error, LeaseLost)
        assert isinstance(items[4].error, ExecutorError)
        assert [i.error for i in (items[0], items[1], items[3])] == [None] * 3
        done = dict(results.get(timeout=WAIT) for _ in range(3))
        assert sorted(done) == [0, 1, 3]
        assert {r.outcome for r in done.values()} == {"completed"}
        assert sorted(p.name for p in marks.iterdir()) == ["0", "1", "3"]  # 2 never ran
        refused = pinned[2]
        assert not running(refused["pid"]) and not Path(refused["run"]).exists()
    finally:
        shell.close()
