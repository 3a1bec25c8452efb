"""The application service: read state, decide, append, apply, retry on conflict.

Every command follows the same path (see DESIGN.md, "The flow of one transition"): catch
the scheduler projection up to the log head, call a pure decision in `rota.domain`, append
its events with the expected version of every stream it read, and apply them. The core
is `service_core.LifecycleService`; recovery, admission and control commands live in their
own modules and are composed here.
"""

from __future__ import annotations

from rota.domain.admission import GateDecision, Waiting

from .service_admission import AdmissionCommands
from .service_control import ControlCommands, Dispatch
from .service_core import Claimed, StartPass, config_generation
from .service_recovery import Recovered, RecoveryCommands, RecoveryPass


class SchedulerService(RecoveryCommands, AdmissionCommands, ControlCommands):
    """Every command of the scheduler over one store (see the module docstring)."""


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
