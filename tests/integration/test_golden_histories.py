"""Golden histories: logs an earlier rota wrote must replay to the state recorded with them.

`tests/histories/*.jsonl` are exports of real scenarios (see tests/histories/README.md) and
`expected.json` records, for each, its event count, head hash, the scheduler projection
digest after replaying it from position 0, and every Work's final facts and digest. Each
history must still verify, decode row by row through the current codec (a schema change
that breaks old rows fails here), fold to the recorded digest, and load into a fresh store
that `rota.open` brings up in the recorded state. `divergent.jsonl` is a copy of one
history with one payload altered and its chain recomputed: the audit passes, so only
replay can tell, and it must (naming the first Work whose state differs).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import rota
from rota.application.errors import CorruptRecord
from rota.application.timestamps import parse_timestamp
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections.scheduler import SchedulerProjection
from rota.replay.export import import_export, open_export, read_header, read_records, verify_export

HISTORIES_DIR = Path(__file__).resolve().parents[1] / "histories"
EXPECTED: dict[str, Any] = json.loads((HISTORIES_DIR / "expected.json").read_text("utf-8"))
HISTORIES = sorted(EXPECTED["histories"])
DIVERGENT: dict[str, Any] = EXPECTED["divergent"]
REGENERATE = (
    "If the change of replay is deliberate (a projection change), regenerate the golden "
    "histories with `python -P tests/histories/make_histories.py` and explain in the commit "
    "message why each regenerated history changed. If it is not deliberate, replay of logs "
    "already written has changed: fix the code, not the histories."
)


def _generator() -> ModuleType:
    """tests/histories/make_histories.py, for the per-Work facts and digests it recorded."""
    name = "rota_golden_make_histories"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HISTORIES_DIR / "make_histories.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


golden = _generator()


def replay(path: Path) -> tuple[SchedulerProjection, int, str]:
    """Decode every row through the current codec and fold it into a fresh projection."""
    projection = SchedulerProjection()
    count, head = 0, GENESIS_HEX
    with open_export(path) as src:
        header = read_header(src)
        for row in read_records(src, header):
            try:
                event = DEFAULT_CODEC.decode(row.type, row.type_version, row.data, row.position)
            except CorruptRecord as exc:
                pytest.fail(
                    f"{path.name}: {exc}. A row an earlier rota wrote no longer decodes: a "
                    "schema change must keep old rows readable (an upcaster in "
                    "rota.domain.upcasting); regenerating the history would hide the break."
                )
            projection.apply(
                row.position, row.stream, row.version, parse_timestamp(row.recorded_at), event
            )
            count, head = count + 1, row.hash
    return projection, count, head


def first_divergent(projection: SchedulerProjection, digests: dict[str, str]) -> str | None:
    """The first Work (by id) whose replayed state is not the recorded one."""
    works = projection.works
    for work_id in sorted(set(works) | set(digests)):
        if work_id not in works or golden.work_digest(works[work_id]) != digests.get(work_id):
            return work_id
    return None


def divergence(name: str, projection: SchedulerProjection, recorded: dict[str, Any]) -> str:
    """Why a replay is not the recorded state, for a failure message."""
    work_id = first_divergent(projection, recorded["work_digests"])
    if work_id is None:
        where = "every Work is as recorded; the difference is in pools, scopes, budgets or turns"
    else:
        now = projection.works.get(work_id)
        replayed = golden.work_facts(now) if now is not None else "absent"
        was = recorded["works"].get(work_id, "absent")
        where = f"the first Work whose state differs is {work_id!r}: recorded {was}, replayed "
        where += f"{replayed}" if replayed != was else "the same facts (it differs in detail)"
    return (
        f"{name}: replay gives digest {projection.digest()}, the recorded digest is "
        f"{recorded['digest']}; {where}. {REGENERATE}"
    )


@pytest.mark.parametrize("name", HISTORIES)
def test_the_history_verifies(name: str) -> None:
    recorded = EXPECTED["histories"][name]
    report = verify_export(HISTORIES_DIR / recorded["file"])
    assert report.ok, f"{name}: {report.reason} (position {report.first_bad_position})"
    assert (report.checked, report.head_hash) == (recorded["events"], recorded["head_hash"])


@pytest.mark.parametrize("name", HISTORIES)
def test_replay_from_position_zero_gives_the_recorded_state(name: str) -> None:
    recorded = EXPECTED["histories"][name]
    projection, count, head = replay(HISTORIES_DIR / recorded["file"])
    assert (count, head) == (recorded["events"], recorded["head_hash"])
    assert projection.digest() == recorded["digest"], divergence(name, projection, recorded)
    facts = {w: golden.work_facts(projection.works[w]) for w in sorted(projection.works)}
    assert facts == recorded["works"], f"{name}: the Works' facts changed. {REGENERATE}"


@pytest.mark.parametrize("name", HISTORIES)
def test_an_imported_history_opens_in_the_recorded_state(name: str, tmp_path: Path) -> None:
    recorded = EXPECTED["histories"][name]
    db = tmp_path / f"{name}.db"
    store = SQLiteStore(db)
    try:
        report = import_export(HISTORIES_DIR / recorded["file"], store)
    finally:
        store.close()
    assert (report.head_position, report.head_hash) == (recorded["events"], recorded["head_hash"])
    clock = ManualClock(parse_timestamp(recorded["end"]))
    config = recorded["config"]
    with rota.open(db, clock=clock, config=config, owner="golden-replay") as scheduler:
        projection = scheduler.service.projection
        assert projection.digest() == recorded["digest"], divergence(name, projection, recorded)
        assert scheduler.store.head().position == recorded["events"], "opening wrote events"


def test_replay_detects_the_divergent_history() -> None:
    original = EXPECTED["histories"][DIVERGENT["copy_of"]]
    path = HISTORIES_DIR / DIVERGENT["file"]
    report = verify_export(path)
    assert report.ok, f"the divergent history must be internally consistent: {report.reason}"
    assert report.head_hash == DIVERGENT["head_hash"] != original["head_hash"]
    projection, count, _ = replay(path)
    assert count == original["events"] == DIVERGENT["events"]
    digest = projection.digest()
    assert digest == DIVERGENT["digest"], divergence("divergent", projection, DIVERGENT)
    assert digest != original["digest"], "replay missed the altered payload"
    # Replay names the Work the altered event belongs to, not merely "something differs".
    assert first_divergent(projection, original["work_digests"]) == DIVERGENT["altered_work"]
    message = divergence(DIVERGENT["copy_of"], projection, original)
    assert f"the first Work whose state differs is {DIVERGENT['altered_work']!r}" in message
    assert "python -P tests/histories/make_histories.py" in message and "commit" in message


def test_every_history_file_is_recorded() -> None:
    files = {p.name for p in HISTORIES_DIR.glob("*.jsonl")}
    recorded = {EXPECTED["histories"][n]["file"] for n in HISTORIES} | {DIVERGENT["file"]}
    assert files == recorded, "a history file without expectations, or the reverse"
    assert len(HISTORIES) >= 5
