"""Named wait predicates: judge pending input for parked attempts, and record the verdicts.

A waiting result's `NamedWait(name)` names a predicate registered on the scheduler
(`WaitCheck`). The domain cannot run code, so the start pass hands back the parked Work
with input to judge (`Plan.judge`); `judge` asks the predicate outside any transaction,
then records each verdict (`core.execution.wait_judged`), rechecking in the append that the
Work is still parked at the same epoch with that input unjudged. Replay reads the verdicts
and never asks again. A predicate that raises, or a name nothing is registered under (a
restart without it), holds the Work (kind `wait`) with a reason until an operator
releases it; its input is judged again then. Key and schema predicates need none of this:
the domain judges them (rota.domain.waits).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Literal

import msgspec

from rota.application.commands.requests import Receipt
from rota.application.configuration import Configuration
from rota.application.ports import AppendResult, WaitCheck
from rota.application.transactions import Transactions
from rota.domain import waits
from rota.domain.emit import Emit, work_stream
from rota.domain.errors import Refusal
from rota.domain.events import accepted_input

log = logging.getLogger("rota.host")

# A verdict to record: (work, attempt, epoch, input key, matched) or a hold reason.
Verdict = tuple[str, int, int, str, bool]


class InjectAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What an inject did (`Scheduler.inject`, `POST /v1/work/{id}/inject`, `rota inject`).

    `delivery`: `control` (a running attempt: a control intent delivers the input to it),
    `wake` (a parked attempt whose wait matches the input: it resumes at the next start
    pass, this input its wake) or `queued` (a parked attempt whose wait does not match, or
    not yet: the input stays pending; `queued` says why). With a request id, `request` is
    its receipt (`repeated` when an earlier call recorded the input).
    """

    work: str
    key: str
    position: int
    delivery: Literal["control", "wake", "queued"]
    queued: str | None = None
    request: Receipt | None = None  # with a request id: what recorded it (`requests`)


class WaitCommands:
    """The named wait predicates of this scheduler, and the recording of their verdicts."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config
        self.predicates: dict[str, WaitCheck] = {}

    def register(self, name: str, check: WaitCheck) -> None:
        """Register `check` under `name` (a waiting result's `NamedWait(name)`)."""
        waits.check_wait(waits.NamedWait(name=name))  # a name a result could give (invalid_wait)
        with self.tx.lock:
            self.predicates[name] = check

    def judge(self, work_ids: Iterable[str]) -> int:
        """Ask each Work's named wait about its unjudged input; returns the verdicts and
        holds recorded. Inputs are asked in order; a raise or an unknown name stops that
        Work at once with a hold (the inputs after it stay unjudged)."""
        verdicts: list[Verdict] = []
        holds: dict[str, str] = {}
        with self.tx.lock:
            asked = []
            for work_id in work_ids:
                work = self.tx.projection.works.get(work_id)
                found = None if work is None else waits.named_wait(work)
                if work is not None and found is not None:
                    asked.append((work_id, found[0], found[1], waits.unjudged(work)))
        for work_id, attempt, wait, inputs in asked:
            check = self.predicates.get(wait.name)
            if check is None:
                holds[work_id] = (
                    f"named wait predicate {wait.name!r} is not registered on this scheduler "
                    "(register it before the scheduler runs, then release this hold)"
                )
                continue
            for item in inputs:
                try:
                    matched = check(item) is True
                except Exception as exc:  # (its text may carry the payload: type only)
                    log.warning(
                        "wait predicate %s raised %s on %s input %s",
                        wait.name,
                        type(exc).__name__,
                        work_id,
                        item.key,
                    )
                    holds[work_id] = (
                        f"named wait predicate {wait.name!r} raised {type(exc).__name__} on "
                        f"input {item.key!r}: fix it, then release this hold"
                    )
                    break
                verdicts.append((work_id, attempt.number, attempt.epoch, item.key, matched))
        return self._record(verdicts, holds) if verdicts or holds else 0

    def _record(self, verdicts: list[Verdict], holds: dict[str, str]) -> int:
        def decide() -> tuple[list[Emit], dict[str, int]]:
            emits: list[Emit] = []
            works = self.tx.projection.works
            expected: dict[str, int] = {}
            for work_id, number, epoch, key, matched in verdicts:
                work = works.get(work_id)
                if work is None or key not in {p.key for p in waits.unjudged(work)}:
                    continue  # judged meanwhile, or no longer parked: nothing to record
                try:
                    emits.append(waits.record_verdict(work, number, epoch, key, matched))
                except Refusal:
                    continue  # resumed or parked again since it was asked
                expected[work_stream(work_id)] = work.version
            for work_id, reason in holds.items():
                work = works.get(work_id)
                if work is not None and waits.named_wait(work) is not None:
                    emits.append(waits.hold_wait(work, reason))
                    expected[work_stream(work_id)] = work.version
            return emits, expected

        return len(self.tx.transact(decide).recorded)

    def answer(self, work_id: str, result: AppendResult) -> InjectAnswer:
        """The answer to an inject that appended `result`. Input for a parked attempt with a
        named wait registered here is judged at once, so the answer says if it wakes."""
        # (an input with the key of the Work's first one is that input: its definition)
        accepted, given = next(
            (r, i) for r in result.recorded if (i := accepted_input(r.event)) is not None
        )
        key = given.key
        with self.tx.lock:
            work = self.tx.projection.works.get(work_id)
            found = None if work is None else waits.named_wait(work)
        if found is not None and found[1].name in self.predicates:
            self.judge([work_id])
        with self.tx.lock:
            work = self.tx.projection.works.get(work_id)
            current = None if work is None else work.current
            item = None if work is None else next((p for p in work.pending if p.key == key), None)
            if current is None or current.status != "parked" or item is None:
                return InjectAnswer(
                    work=work_id, key=key, position=accepted.position, delivery="control"
                )
            reason = waits.queued_reason(current, item)
            if work is not None and work.holds:
                hold = work.holds[0]
                reason = f"the Work is held ({hold.kind}): {hold.reason}"
        return InjectAnswer(
            work=work_id,
            key=key,
            position=accepted.position,
            delivery="queued" if reason else "wake",
            queued=reason,
        )
