"""`evolve`'s fast rules (the events of every attempt's life, bumping the Work's version in
the copy they make) give exactly the state the rule table gives (version bumped first, then
the table's rule), for every such event of every golden history."""

from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace

from rota.application.ports import RawRecord
from rota.application.timestamps import parse_timestamp
from rota.domain import evolve as fold
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.replay.export import open_export, read_header, read_records

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*.jsonl"))


def rows(history: Path) -> list[RawRecord]:
    with open_export(history) as src:
        return list(read_records(src, read_header(src)))


def test_the_fast_rules_agree_with_the_rule_table() -> None:
    checked = 0
    for history in HISTORIES:
        works: dict[str, fold.WorkState] = {}
        for record in rows(history):
            if not record.stream.startswith("work/"):
                continue
            work_id = record.stream[5:]
            event = DEFAULT_CODEC.decode(record.type, record.type_version, record.data)
            at = parse_timestamp(record.recorded_at)
            before = works.get(work_id)
            after = fold.evolve(before, event, record.position, at)
            if before is not None and type(event) in fold._FAST:
                bumped = replace(before, version=before.version + 1)
                table = fold._resolve(type(event))(bumped, event, record.position, at)
                assert after == table, (history.name, record.position)
                checked += 1
            if after is not None:
                works[work_id] = after
    assert checked > 50  # every kind of fast event, many times over
    assert set(fold._FAST) <= {type(e) for e in _kinds()}


def _kinds() -> list[object]:
    return [
        DEFAULT_CODEC.decode(r.type, r.type_version, r.data)
        for history in HISTORIES
        for r in rows(history)
    ]
