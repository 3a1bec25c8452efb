"""The submit path of an embedded scheduler: a `Submission` checked, group-committed (one
caller) or appended in one transaction (`submit_many`), and returned as `WorkHandle`s."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rota.application.group_commit import SubmitGroup
from rota.application.host import Host
from rota.application.lifecycle import SubmitRequest, submit_request
from rota.application.ports import AppendResult, EventStore, Executor
from rota.application.queries.work_views import WorkView
from rota.application.service import SchedulerService
from rota.domain.errors import DomainCode, RotaError
from rota.embedded.bindings import BindingPaths
from rota.embedded.handles import WorkHandle
from rota.embedded.submissions import Submission, input_position, submission_inputs


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

    def one(self, item: Submission) -> WorkHandle:
        """Submit one Work, group-committed with whatever other threads submit meanwhile."""
        self.group.arrive()
        try:
            request = self.request(item)
        except BaseException:
            self.group.leave()
            raise
        recorded = self.group.submit(request)
        wake = self.host.wake
        if not wake.is_set():  # set by another caller of the batch, and not yet seen
            wake.set()
        return self._handle(request, recorded)

    def many(self, works: Iterable[Submission | Mapping[str, Any]]) -> list[WorkHandle]:
        """Submit every item in one transaction, all or nothing."""
        items = [w if isinstance(w, Submission) else Submission(**w) for w in works]
        requests = [self.request(item) for item in items]
        if not requests:
            return []
        outcomes = self.service.lifecycle.submit_batch(requests, atomic=True)
        self.host.wake.set()
        handles: list[WorkHandle] = []
        for request, outcome in zip(requests, outcomes, strict=True):
            assert not isinstance(outcome, RotaError)  # atomic: a refusal was raised
            handles.append(self._handle(request, outcome))
        return handles

    def request(self, item: Submission) -> SubmitRequest:
        # Never accept Work nothing here could run. Not under the projection's lock: a
        # group commit holds it while it appends, and the next submits prepare meanwhile
        # (the two dict reads are atomic; a registration racing a submit may go either way).
        known = self.service.bindings.get(item.binding)
        self.binding_paths.require_executor(known, self.executors)
        return submit_request(
            item.work_id,
            binding=item.binding,
            scope=item.scope,
            kind=item.kind,
            trigger=item.trigger,
            safety=item.safety,
            inputs=submission_inputs(item),
        )

    def _handle(self, request: SubmitRequest, recorded: AppendResult) -> WorkHandle:
        return WorkHandle(
            request.work_id,
            read=self.read,
            store=self.store,
            kind=str(request.spec["kind"]),
            input_position=input_position(request.work_id, recorded, request.inputs, self.store),
        )

    def handle(self, work_id: str) -> WorkHandle:
        """A handle on a Work submitted earlier, without an input position."""
        view = self.read(work_id)
        if view is None:
            raise RotaError(f"no Work {work_id!r}", code=DomainCode.UNKNOWN_WORK)
        return WorkHandle(
            work_id, read=self.read, store=self.store, kind=view.kind, input_position=None
        )


__all__ = ["Submits"]
