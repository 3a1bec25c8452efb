"""The configuration composition of one scheduler: bindings, registrations, settings.

It pins what an attempt keeps using (`Pinned`: binding, registration, timeout, lease) under
a configuration generation, a content hash of the bindings and registrations that is
stable across restarts. A binding's secrets are taken out before it is pinned and kept in
memory here, for the launch (`secrets_for`; see `rota.application.secrets`).
"""

from __future__ import annotations

import hashlib
import logging

import msgspec

from rota.application.errors import PortCode
from rota.application.secrets import split_secrets
from rota.domain.errors import NotEligible
from rota.domain.policy import Binding, Pinned, Registration, Settings
from rota.domain.state import AttemptState

log = logging.getLogger("rota.scheduler")


def config_generation(bindings: dict[str, Binding], registrations: dict[str, Registration]) -> str:
    """A content hash of the bindings and registrations: stable across restarts."""
    blob = msgspec.json.encode(
        [sorted(bindings.items()), sorted(registrations.items())], order="sorted"
    )
    return hashlib.sha256(blob).hexdigest()[:12]


class Configuration:
    """Bindings, registrations and settings; what each attempt is pinned to."""

    def __init__(
        self,
        *,
        settings: Settings,
        owner: str,
        bindings: dict[str, Binding] | None = None,
        registrations: dict[str, Registration] | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        self.bindings: dict[str, Binding] = {}
        # Each binding's `environment` values: in memory only, handed to the executor at
        # launch (rota.application.secrets); the binding keeps only their digest.
        self._secrets: dict[str, dict[str, str]] = {}
        for binding in (bindings or {}).values():
            self._define(binding)
        self.registrations: dict[str, Registration] = dict(registrations or {})
        self._generation: str | None = None
        self._pinned: dict[str, Pinned] = {}

    @property
    def generation(self) -> str:
        if self._generation is None:
            self._generation = config_generation(self.bindings, self.registrations)
        return self._generation

    def set_binding(self, binding: Binding) -> None:
        """Define or redefine a binding: a new configuration generation."""
        self._define(binding)
        self._configured()

    def _define(self, binding: Binding) -> None:
        pinnable, secrets = split_secrets(binding)
        self.bindings[binding.name] = pinnable
        self._secrets[binding.name] = secrets

    def secrets_for(self, attempt: AttemptState) -> dict[str, str]:
        """The current `environment` values of the attempt's binding, for its launch.

        Values are resolved now, not pinned: an attempt relaunched after its binding's
        environment changed gets the current values, and the change is logged (by name).
        """
        binding = attempt.pinned.binding
        secrets = self._secrets.get(binding.name, {})
        current = self.bindings.get(binding.name)
        if current is not None and current.secrets_digest != binding.secrets_digest:
            log.warning(
                "binding %s: its environment changed since attempt %s was pinned; "
                "launching with the current values",
                binding.name,
                attempt.execution_id,
            )
        return dict(secrets)

    def set_registration(self, registration: Registration) -> None:
        """Register an executor: a new configuration generation."""
        self.registrations[registration.name] = registration
        self._configured()

    def _configured(self) -> None:
        self._generation = None
        self._pinned.clear()

    def pinned_for(self, binding_name: str) -> Pinned:
        pinned = self._pinned.get(binding_name)
        if pinned is None:
            pinned = self._pinned[binding_name] = self._pin(binding_name)
        return pinned

    def _pin(self, binding_name: str) -> Pinned:
        binding = self.bindings.get(binding_name)
        if binding is None:
            raise NotEligible(
                f"binding {binding_name!r} is not configured", code=PortCode.UNKNOWN_BINDING
            )
        registration = self.registrations.get(binding.executor)
        if registration is None:
            raise NotEligible(
                f"binding {binding_name!r} names executor {binding.executor!r}, "
                "which is not registered",
                code=PortCode.UNKNOWN_EXECUTOR,
            )
        return Pinned(
            generation=self.generation,
            binding=binding,
            registration=registration,
            timeout_seconds=binding.timeout_seconds or self.settings.timeout_seconds,
            lease_seconds=self.settings.lease_seconds,
            max_segments=self.settings.max_segments,
        )
