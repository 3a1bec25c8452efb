"""The application service: the transaction loop and the command groups, composed.

`SchedulerService` owns one `Transactions` loop (the store, the scheduler projection, the
lock) and one `Configuration` (bindings, registrations, settings), and composes the
command groups over them: `lifecycle` (Work, input, starts, fenced writes, outcomes,
timers), `recovery`, `admission`, `flow` (priorities, pauses), `control`, `schedules` and
`waits`. Each group decides with `rota.domain` and appends through the one loop (see
DESIGN.md, "The flow of one transition"). The properties below expose the state the
groups share, for the host, the views and replay.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from rota.application.commands.admission import AdmissionCommands
from rota.application.commands.control import ControlCommands, Dispatch
from rota.application.commands.flow import FlowCommands
from rota.application.commands.lifecycle import Claimed, LifecycleCommands, StartPass
from rota.application.commands.recovery import Recovered, RecoveryCommands, RecoveryPass
from rota.application.commands.schedules import ScheduleCommands
from rota.application.commands.waits import WaitCommands
from rota.application.configuration import Configuration, config_generation
from rota.application.live_projections import LiveProjections
from rota.application.personal import CipherFactory, PersonalData
from rota.application.ports import AppendObserver, EventStore, PersonalKeys, ProjectionStore
from rota.application.tallies import Tallies
from rota.application.transactions import Transactions
from rota.domain.admission import GateDecision, Waiting
from rota.domain.grants import Grant
from rota.domain.policy import Binding, Pinned, Registration, Settings
from rota.domain.state import AttemptState
from rota.projections.scheduler import SchedulerProjection


class SchedulerService:
    """Every command of the scheduler over one store, in its command groups."""

    def __init__(
        self,
        store: EventStore,
        *,
        settings: Settings,
        owner: str,
        bindings: dict[str, Binding] | None = None,
        registrations: dict[str, Registration] | None = None,
        projections: ProjectionStore | None = None,
        save_every: int = 5000,
        personal_keys: PersonalKeys | None = None,
        cipher: CipherFactory | None = None,
    ) -> None:
        self.configuration = Configuration(
            settings=settings, owner=owner, bindings=bindings, registrations=registrations
        )
        self.transactions = Transactions(store, projections=projections, save_every=save_every)
        self.lifecycle = LifecycleCommands(self.transactions, self.configuration)
        self.recovery = RecoveryCommands(self.transactions, self.configuration)
        self.admission = AdmissionCommands(self.transactions, self.configuration)
        self.flow = FlowCommands(self.transactions, self.configuration)
        self.control = ControlCommands(self.transactions, self.configuration)
        self.schedules = ScheduleCommands(self.transactions, self.configuration)
        self.waits = WaitCommands(self.transactions, self.configuration)
        # Sealing, opening and forgetting personal input fields, with the key table and the
        # cipher the composition root (rota.bootstrap) chose; None: personal input refused.
        self.personal: PersonalData | None = None
        if personal_keys is not None and cipher is not None:
            self.personal = PersonalData(
                personal_keys,
                cipher,
                self.transactions,
                binding_paths=lambda name: self.configuration.personal.get(name, ()),
            )
        # Counts over every Work (the HTTP overview, holds, metrics), counted on first use.
        self.tallies = Tallies(self.transactions)

    # -- the shared state ------------------------------------------------------------------

    @property
    def store(self) -> EventStore:
        return self.transactions.store

    @property
    def projection(self) -> SchedulerProjection:
        return self.transactions.projection

    @projection.setter
    def projection(self, projection: SchedulerProjection) -> None:
        self.transactions.projection = projection

    @property
    def stored(self) -> LiveProjections | None:
        return self.transactions.stored

    @property
    def lock(self) -> Any:
        return self.transactions.lock

    @property
    def conflicts(self) -> int:
        return self.transactions.conflicts

    @property
    def settings(self) -> Settings:
        return self.configuration.settings

    @property
    def owner(self) -> str:
        return self.configuration.owner

    @property
    def bindings(self) -> dict[str, Binding]:
        return self.configuration.bindings

    @property
    def registrations(self) -> dict[str, Registration]:
        return self.configuration.registrations

    @property
    def generation(self) -> str:
        return self.configuration.generation

    def observe(self, observer: AppendObserver) -> None:
        """Tell `observer` what each append of this service newly recorded (`AppendObserver`)."""
        self.transactions.observers.append(observer)

    def catch_up(self) -> int:
        """Apply every event the log holds beyond the projection; returns how many."""
        return self.transactions.catch_up()

    def now(self) -> datetime:
        return self.transactions.now()

    def save_projections(self) -> bool:
        return self.transactions.save_projections()

    def close_projections(self) -> None:
        self.transactions.close_projections()

    # -- configuration (under the projection's lock: a start pass pins under it) ----------

    def configuring(self) -> AbstractContextManager[Any]:
        """Hold off start passes while a configuration change (several bindings and
        registrations, checked together) is made: `with service.configuring(): ...`."""
        lock: AbstractContextManager[Any] = self.lock
        return lock

    def set_binding(self, binding: Binding) -> None:
        """Define or redefine a binding: a new configuration generation."""
        with self.lock:
            self.configuration.set_binding(binding)

    def set_registration(self, registration: Registration) -> None:
        """Register an executor: a new configuration generation."""
        with self.lock:
            self.configuration.set_registration(registration)

    def pinned_for(self, binding_name: str, grants: tuple[str, ...] = ()) -> Pinned:
        return self.configuration.pinned_for(binding_name, grants)

    def set_grant(self, grant: Grant, environment: dict[str, str] | None = None) -> None:
        """Define or redefine a binding grant (rota.domain.grants)."""
        with self.lock:
            self.configuration.set_grant(grant, environment)

    def secrets_for(self, attempt: AttemptState) -> dict[str, str]:
        return self.configuration.secrets_for(attempt)


__all__ = [
    "Claimed",
    "Dispatch",
    "GateDecision",
    "Recovered",
    "RecoveryPass",
    "SchedulerService",
    "StartPass",
    "Waiting",
    "config_generation",
]
