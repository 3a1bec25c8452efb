"""What `rota doctor` reports: each check's verdict with its advice, and the report of all.

A `Check(name, status, detail, advice)` has `status` `ok`, `warn` or `fail`, and `advice`
says exactly what to run. The report is `ok` unless a check fails. `guarded` runs one check
and turns an error it raises into a `fail` with the advice its kind needs: any failure of
the log's checks asks for a full restore (`FULL_RESTORE`), never recover-corrupt.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

import apsw
import msgspec

from rota.application.errors import StoreError

FULL_RESTORE = (
    "the log is the only authority and cannot be rebuilt: stop every scheduler, keep the "
    "damaged files, restore a full backup of the store (docs/runbook-corruption.md); do "
    "not run recover-corrupt"
)


Status = Literal["ok", "warn", "fail"]


class Check(msgspec.Struct):
    name: str
    status: Status
    detail: str
    advice: str = ""


class DoctorReport(msgspec.Struct):
    ok: bool
    checks: list[Check]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


def recover_advice(when: datetime | None = None) -> str:
    day = (when or datetime.now(UTC)).strftime("%Y%m%d")
    return (
        f"stop 'rota run', then 'rota recover-corrupt --backup-name projections-{day} "
        "--dry-run' and the same without --dry-run: it isolates the projection file and "
        "rebuilds every projection from the log"
    )


def guarded(name: str, body: Callable[[], Check]) -> Check:
    try:
        return body()
    except (apsw.Error, StoreError, OSError, ValueError, KeyError, msgspec.MsgspecError) as exc:
        advice = recover_advice() if name.startswith("projection") else FULL_RESTORE
        return Check(name, "fail", f"the check could not run: {type(exc).__name__}: {exc}", advice)
