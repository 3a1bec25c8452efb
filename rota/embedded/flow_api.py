"""An operator's flow control in the embedded API: `scheduler.flow` (and `AsyncScheduler.flow`).

```python
scheduler.flow.pause("pool", "jobs", reason="the database is being upgraded")
scheduler.flow.pause("key", "tenant:acme")      # only Work carrying tenant:acme
scheduler.flow.pause("scope", "root/batch")     # that scope and every scope below it
scheduler.flow.paused()                         # [PauseView(target="pool", name="jobs", ...)]
scheduler.flow.resume("pool", "jobs")
scheduler.flow.reprioritize("report-7", 10, reason="the board meets at noon")
```

Each change is one event (`core.flow.paused`, `core.flow.resumed`,
`core.work.reprioritized`) naming who acted and why. A pause deletes and re-queues nothing:
ready Work it covers waits with the code `flow_paused` ("pool jobs is paused (reason)"),
running attempts go on, and the Work starts at the first pass after the resume. Every
command takes a `request_id` (as `Scheduler.cancel`): a repeat appends nothing and returns
the first receipt. Pausing what is paused, or giving a Work its own priority, appends
nothing (a receipt with `repeated` True); resuming what is not paused is `not_paused`.
"""

from __future__ import annotations

import asyncio

from rota.application.commands.requests import Receipt, receipt
from rota.application.host import Host
from rota.application.queries.pauses import PauseQueries, PauseView
from rota.application.service import SchedulerService


class FlowControl:
    """Pause and resume pools, keys and scopes; change a Work's priority."""

    def __init__(self, service: SchedulerService, host: Host) -> None:
        self.service = service
        self.host = host
        self._pauses = PauseQueries(service)

    def pause(
        self,
        target: str,
        name: str,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """Pause a pool, a key or a scope (`target` is "pool", "key" or "scope")."""
        result = self.service.flow.pause(target, name, reason=reason, by=by, request_id=request_id)
        return receipt(result, request_id)

    def resume(
        self,
        target: str,
        name: str,
        *,
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """Resume a paused pool, key or scope; its held Work starts at the next pass."""
        result = self.service.flow.resume(target, name, by=by, request_id=request_id)
        self.host.wake.set()
        return receipt(result, request_id)

    def paused(self) -> list[PauseView]:
        """The pauses in force: target, name, reason, who and since (position and time)."""
        return self._pauses.paused()

    def reprioritize(
        self,
        work_id: str,
        priority: int,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        """Give a Work that is not finished a new priority (higher starts first; -1000 to
        1000): admission orders by it from the next pass on."""
        result = self.service.flow.reprioritize(
            work_id, priority, reason=reason, by=by, request_id=request_id
        )
        self.host.wake.set()
        return receipt(result, request_id)


class AsyncFlowControl:
    """`FlowControl` as coroutines (each command runs on a worker thread)."""

    def __init__(self, flow: FlowControl) -> None:
        self.sync = flow

    async def pause(
        self,
        target: str,
        name: str,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.pause(target, name, reason=reason, by=by, request_id=request_id)
        )

    async def resume(
        self, target: str, name: str, *, by: str = "operator", request_id: str | None = None
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.resume(target, name, by=by, request_id=request_id)
        )

    async def paused(self) -> list[PauseView]:
        return await asyncio.to_thread(self.sync.paused)

    async def reprioritize(
        self,
        work_id: str,
        priority: int,
        *,
        reason: str = "",
        by: str = "operator",
        request_id: str | None = None,
    ) -> Receipt:
        return await asyncio.to_thread(
            lambda: self.sync.reprioritize(
                work_id, priority, reason=reason, by=by, request_id=request_id
            )
        )


__all__ = ["AsyncFlowControl", "FlowControl", "PauseView"]
