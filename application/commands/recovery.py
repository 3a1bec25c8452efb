"""Recovery commands: recover expired attempts, lose, adopt, fail a recovery, release holds."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from rota.application.commands.requests import Asked, once
from rota.application.configuration import Configuration
from rota.application.ports import AppendResult
from rota.application.transactions import Transactions
from rota.domain import pages, recovery
from rota.domain.emit import Emit, work_stream
from rota.domain.state import AttemptState, WorkState


class Recovered(msgspec.Struct, frozen=True):
    """An attempt this pass recovered: relaunch it, adopt it, or stop it (timed out)."""

    work: WorkState
    attempt: AttemptState
    mode: str
    timed_out: bool
    previous_owner: str


class RecoveryPass(msgspec.Struct):
    recovered: list[Recovered]
    held: list[str]
    unsupported: list[AttemptState]  # pinned to a generation the host cannot serve
    has_more: bool


class RecoveryCommands:
    """Recovery's commands: recover expired attempts, lose, adopt, relaunch, release holds."""

    def __init__(self, tx: Transactions, config: Configuration) -> None:
        self.tx = tx
        self.config = config

    def recovery_pass(
        self,
        limit: int = pages.DEFAULT_PAGE,
        supported: Callable[[AttemptState], bool] = lambda attempt: True,
        remaining: Callable[[AttemptState], float | None] = lambda attempt: None,
    ) -> RecoveryPass:
        """Recover one page of attempts whose lease expired or was released, in one append.

        `supported(attempt)` says whether this host has the attempt's pinned executor; an
        unsupported attempt is left alone (never given to a replacement executor).
        `remaining(attempt)` is the run time left of an attempt this host's own process
        runs (by its monotonic clock), None for any other: it decides the timeout and
        moves a deadline the wall clock jumped past (`rota.domain.recovery`).
        """
        held: list[str] = []
        unsupported: list[AttemptState] = []
        more = [False]

        def decide() -> tuple[list[Emit], dict[str, int]]:
            held.clear()
            unsupported.clear()
            now = self.tx.now()
            live = [self.tx.projection.works[w] for w in set(self.tx.projection.live.values())]
            due, more[0] = recovery.page(live, now, limit)
            emits: list[Emit] = []
            expected: dict[str, int] = {}
            for work in due:
                assert work.current is not None
                if not supported(work.current):
                    unsupported.append(work.current)
                    continue
                found = recovery.recover(
                    work,
                    now=now,
                    owner=self.config.owner,
                    crash_loop_limit=self.config.settings.crash_loop_limit,
                    remaining=remaining(work.current),
                )
                if found and found[0].event.tag() == "core.work.held":
                    held.append(work.work_id)
                emits.extend(found)
                if found:
                    expected[work_stream(work.work_id)] = work.version
            return emits, expected

        result = self.tx.transact(decide)
        recovered: list[Recovered] = []
        for recorded in result.recorded:
            event = recorded.event
            if recorded.type == "core.execution.recovered":
                work = self.tx.projection.works[recorded.stream[5:]]
                assert work.current is not None
                timed_out = getattr(event, "reason", "") == "timeout"
                mode = getattr(event, "mode", "adopt")
                previous = getattr(event, "previous_owner", "")
                recovered.append(Recovered(work, work.current, mode, timed_out, previous))
        return RecoveryPass(recovered, held, unsupported, more[0])

    def lose(self, execution_id: str, epoch: int, evidence: str = "not_running") -> AppendResult:
        """Trusted not-running evidence and no result: the attempt is lost."""
        return self.tx.fenced(
            execution_id, lambda w, n, now: recovery.lose(w, n, epoch, now, evidence)
        )

    def recovery_failed(self, execution_id: str, epoch: int, evidence: str) -> AppendResult:
        """The recovered attempt's executor found no evidence of it (`unknown`, or `error`):
        it ends as a safe failure keeping its slot, and the Work is held at the ceiling of
        failed recoveries (`settings.recovery_failure_limit`; fenced)."""
        limit = self.config.settings.recovery_failure_limit
        return self.tx.fenced(
            execution_id,
            lambda w, n, now: recovery.recovery_failed(
                w, n, epoch, now, evidence=evidence, limit=limit
            ),
        )

    def relaunch_unstarted(self, execution_id: str, epoch: int) -> Recovered | None:
        """Relaunch an adopted attempt whose executor proved it never started."""
        result = self.tx.fenced(
            execution_id,
            lambda w, n, now: recovery.relaunch_unstarted(
                w, n, epoch, now, self.config.owner, self.config.settings.crash_loop_limit
            ),
        )
        for recorded in result.recorded:
            if recorded.type == "core.execution.recovered":
                work = self.tx.projection.works[recorded.stream[5:]]
                assert work.current is not None
                return Recovered(work, work.current, "relaunch", False, self.config.owner)
        return None

    def adopted(self, execution_id: str, epoch: int) -> None:
        """The executor attached to the recovered attempt: record it (fenced)."""
        self.tx.fenced(execution_id, lambda w, n, now: [recovery.adopted(w, n, epoch, now)])

    def adoptable(self, execution_id: str, epoch: int) -> bool:
        with self.tx.lock:
            self.tx.catch_up()
            work_id, _, number = execution_id.rpartition("/")
            work = self.tx.projection.works.get(work_id)
            return number.isdigit() and recovery.adoptable(work, int(number), epoch)

    def release_hold(
        self,
        work_id: str,
        kind: str | None = None,
        by: str = "operator",
        request_id: str | None = None,
    ) -> AppendResult:
        """Release an operator-releasable hold (with a `request_id`, once: the release is
        recorded under `request/<id>`)."""

        def decide() -> tuple[list[Emit], dict[str, int]]:
            work = self.tx.projection.works.get(work_id)
            emit = recovery.release_hold(work, work_id=work_id, kind=kind, by=by)
            assert work is not None
            return [emit], {work_stream(work_id): work.version}

        fields: dict[str, str] = {"released_by": by}
        if kind is not None:
            fields["kind"] = kind
        asked = Asked("release", ("core.work.released",), work_id, fields)
        return once(self.tx, request_id, asked, decide)
