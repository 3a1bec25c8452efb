"""`make demo`: append a few events to an embedded SQLite log, replay them, verify the chain."""

from __future__ import annotations

import shutil
from pathlib import Path

from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.sqlite_store import SQLiteStore
from rota.infrastructure.store import NewEvent
from rota.replay.audit import verify_chain

DATA = Path("demo-data")


def main() -> None:
    shutil.rmtree(DATA, ignore_errors=True)
    with SQLiteStore(DATA / "rota.db") as store:
        store.append(
            [
                NewEvent(
                    "work/nightly-report",
                    WorkSubmitted(work_id="nightly-report", scope="root/finance", binding="report"),
                ),
                NewEvent(
                    "work/nightly-report",
                    InputAccepted(
                        work_id="nightly-report",
                        sequence=1,
                        key="2026-11-29",
                        payload={"day": "2026-11-29"},
                    ),
                    "input/nightly-report/2026-11-29",
                ),
            ],
            expected={"work/nightly-report": 0},
        )
        again = store.append(
            [
                NewEvent(
                    "work/nightly-report",
                    InputAccepted(
                        work_id="nightly-report",
                        sequence=1,
                        key="2026-11-29",
                        payload={"day": "2026-11-29"},
                    ),
                    "input/nightly-report/2026-11-29",
                )
            ]
        )
        print(f"log: {store.path}")
        for recorded in store.read():
            print(
                f"  {recorded.position}  {recorded.stream}@{recorded.version}  "
                f"{recorded.type}  {recorded.delivery_id or ''}"
            )
        print(f"retrying the same input wrote {again.written} events (delivery identity)")
        report = verify_chain(store)
        print(
            f"hash chain: {'ok' if report.ok else 'BROKEN'} over {report.checked} events, "
            f"head {report.head_hash[:16]}..."
        )


if __name__ == "__main__":
    main()
