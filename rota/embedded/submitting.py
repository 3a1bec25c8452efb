"""The submit path of an embedded scheduler: a `Submission` checked, group-committed (one
caller) or appended in one transaction (`submit_many`), and returned as `WorkHandle`s."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rota.application.errors import PortCode
from rota.application.group_commit import SubmitGroup
from rota.application.host import Host
from rota.application.ports import AppendResult, EventStore, Executor
from rota.application.queries.work_views import WorkView
from rota.application.service import SchedulerService
from rota.domain.errors import DomainCode, RotaError
from rota.domain.submission import BINDING, SubmitWork
from rota.embedded.bindings import BindingPaths
from rota.embedded.handles import WorkHandle
from rota.embedded.submission_values import (
    Submission,
    SubmissionFields,
    as_submission,
    coalesced_into,
    input_position,
    submit_command,
)


class Submits:
    """`Scheduler.submit`, `submit_many` and `handle` over one service and host."""

    def __init__(
        self,
        service: SchedulerService,
        host: Host,
        store: EventStore,
        *,
        executors: dict[str, Executor],
        binding_paths: BindingPaths,
        read: Callable[[str], WorkView | None],
    ) -> None:
        self.service, self.host, self.store = service, host, store
        self.executors, self.binding_paths, self.read = executors, binding_paths, read
        self.group = SubmitGroup(service.lifecycle.submit_batch, store=store)

    def one(self, item: Submission) -> WorkHandle[Any]:
        """Submit one Work, group-committed with whatever other threads submit meanwhile."""
        self.group.arrive()
        try:
            command = self.command(item)
        except BaseException:
            self.group.leave()
            raise
        recorded = self.group.submit(command)
        wake = self.host.wake
        if not wake.is_set():  # set by another caller of the batch, and not yet seen
            wake.set()
        return self._handle(command, recorded)

    def many(self, works: Iterable[Submission | SubmissionFields]) -> list[WorkHandle[Any]]:
        """Submit every item in one transaction, all or nothing."""
        commands = [self.command(as_submission(w)) for w in works]
        if not commands:
            return []
        outcomes = self.service.lifecycle.submit_batch(commands, atomic=True)
        self.host.wake.set()
        handles: list[WorkHandle[Any]] = []
        for command, outcome in zip(commands, outcomes, strict=True):
            assert not isinstance(outcome, RotaError)  # atomic: a refusal was raised
            handles.append(self._handle(command, outcome))
        return handles

    def command(self, item: Submission) -> SubmitWork:
        # Never accept Work nothing here could run. Not under the projection's lock: a
        # group commit holds it while it appends, and the next submits prepare meanwhile
        # (the two dict reads are atomic; a registration racing a submit may go either way).
        known = self.service.bindings.get(item.binding)
        self.binding_paths.require_executor(known, self.executors)
        command = submit_command(item)
        # A malformed name is the domain's to refuse (`invalid_work`), when it decides.
        well_formed = BINDING.fullmatch(item.binding) is not None
        if known is None and well_formed and not self.service.lifecycle.served(item.binding):
            raise unknown_binding(item.binding, sorted(self.service.bindings))
        if self.service.personal is not None:  # (sealed before any group shares the append)
            command = self.service.personal.seal(command)
        return command

    def _handle(self, command: SubmitWork, recorded: AppendResult) -> WorkHandle[Any]:
        # A merged or suppressed submit created no Work: its handle is on the Work it went
        # to (a suppressed input is read by no Work: no input position).
        into = coalesced_into(command, recorded)
        work_id = command.work_id if into is None else into.event.work_id  # type: ignore[attr-defined]
        position = None
        if into is None or into.type == "core.submit.merged":
            position = input_position(command, recorded, self.store, work_id)
        return WorkHandle(
            work_id, read=self.read, store=self.store, kind=command.kind, input_position=position
        )

    def handle(self, work_id: str) -> WorkHandle[Any]:
        """A handle on a Work submitted earlier, without an input position."""
        view = self.read(work_id)
        if view is None:
            raise RotaError(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
        return WorkHandle(
            work_id, read=self.read, store=self.store, kind=view.kind, input_position=None
        )


def unknown_binding(name: str, defined: list[str]) -> RotaError:
    """`unknown_binding`: a binding defined nowhere the submit can see (rota.cli.app)."""
    listed = ", ".join(defined[:10]) + (" ..." if len(defined) > 10 else "") or "none"
    return RotaError(
        f"no binding {name!r}: it is not defined here (bindings: {listed}) and no scheduler "
        "running on this store has served it; check the name, or define it ([[bindings]] "
        "in the config, Scheduler.register) and run a daemon that registers it (rota run "
        "--app MODULE:FUNCTION) before submitting",
        code=PortCode.UNKNOWN_BINDING,
    )


__all__ = ["Submits", "unknown_binding"]
