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
from rota.application.secrets import (
    grant_secrets,
    secrets_digest,
    split_personal,
    split_secrets,
)
from rota.domain.errors import NotEligible
from rota.domain.grants import Grant, with_grants
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
        grants: dict[str, tuple[Grant, dict[str, str]]] | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        self.bindings: dict[str, Binding] = {}
        # Each binding's `environment` values: in memory only, handed to the executor at
        # launch (rota.application.secrets); the binding keeps only their digest.
        self._secrets: dict[str, dict[str, str]] = {}
        # Each binding's personal input fields (`personal = [...]`, rota.application.personal):
        # sealed at submit, so taken out of the config the executor checks and pins.
        self.personal: dict[str, tuple[str, ...]] = {}
        for binding in (bindings or {}).values():
            self._define(binding)
        # The binding grants (rota.domain.grants), and each one's environment values (in
        # memory only, like a binding's).
        self.grants: dict[str, Grant] = {}
        self._grant_secrets: dict[str, dict[str, str]] = {}
        for grant, environment in (grants or {}).values():
            self.grants[grant.name] = grant
            self._grant_secrets[grant.name] = grant_secrets(grant.name, environment)
        self.registrations: dict[str, Registration] = dict(registrations or {})
        self._generation: str | None = None
        self._pinned: dict[tuple[str, tuple[str, ...]], Pinned] = {}

    @property
    def generation(self) -> str:
        if self._generation is None:
            self._generation = config_generation(self.bindings, self.registrations)
        return self._generation

    def set_grant(self, grant: Grant, environment: dict[str, str] | None = None) -> None:
        """Define or redefine a binding grant: attempts pinned from now on take it as it
        is now; pinned attempts keep the config they took."""
        secrets = grant_secrets(grant.name, environment)
        self.grants[grant.name] = grant
        self._grant_secrets[grant.name] = secrets
        self._pinned.clear()

    def set_binding(self, binding: Binding) -> None:
        """Define or redefine a binding: a new configuration generation."""
        self._define(binding)
        self._configured()

    def _define(self, binding: Binding) -> None:
        binding, paths = split_personal(binding)
        pinnable, secrets = split_secrets(binding)
        self.bindings[binding.name] = pinnable
        self._secrets[binding.name] = secrets
        self.personal[binding.name] = paths

    def secrets_for(self, attempt: AttemptState) -> dict[str, str]:
        """The current `environment` values of the attempt's binding and of the grants it
        took (`attempt.grants`, in order, a later one's variable replacing an earlier
        one's), for its launch.

        Values are resolved now, not pinned: an attempt relaunched after its binding's
        environment changed gets the current values, and the change is logged (by name).
        """
        binding = attempt.pinned.binding
        secrets = dict(self._secrets.get(binding.name, {}))
        grants = attempt.grants
        for name in grants:
            secrets.update(self._grant_secrets.get(name, {}))
        current = self.bindings.get(binding.name)
        if current is not None and self._digest(current, attempt.grants) != binding.secrets_digest:
            log.warning(
                "binding %s: its environment changed since attempt %s was pinned; "
                "launching with the current values",
                binding.name,
                attempt.execution_id,
            )
        missing = [name for name in grants if name not in self.grants] if grants else None
        if missing:
            log.warning(
                "attempt %s took grants %s, which are no longer configured; launching "
                "without their environment",
                attempt.execution_id,
                ", ".join(missing),
            )
        return secrets

    def _digest(self, binding: Binding, grants: tuple[str, ...]) -> str | None:
        """The secrets digest of `binding` with `grants`: the binding's own when no grant
        sets environment values, else a digest over all the values it launches with."""
        if not grants or not any(self._grant_secrets.get(name) for name in grants):
            return binding.secrets_digest
        values = dict(self._secrets.get(binding.name, {}))
        for name in grants:
            values.update(self._grant_secrets.get(name, {}))
        return secrets_digest(values)

    def set_registration(self, registration: Registration) -> None:
        """Register an executor: a new configuration generation."""
        self.registrations[registration.name] = registration
        self._configured()

    def _configured(self) -> None:
        self._generation = None
        self._pinned.clear()

    def pinned_for(self, binding_name: str, grants: tuple[str, ...] = ()) -> Pinned:
        """What an attempt of a Work on `binding_name` opted into `grants` pins."""
        key = (binding_name, grants)
        pinned = self._pinned.get(key)
        if pinned is None:
            pinned = self._pinned[key] = self._pin(binding_name, grants)
        return pinned

    def unknown_grants(self, grants: tuple[str, ...]) -> list[str]:
        return [name for name in grants if name not in self.grants]

    def _pin(self, binding_name: str, grants: tuple[str, ...]) -> Pinned:
        binding = self.bindings.get(binding_name)
        if binding is None:
            raise NotEligible(
                f"binding {binding_name!r} is not configured", code=PortCode.UNKNOWN_BINDING
            )
        unknown = self.unknown_grants(grants) if grants else None
        if unknown:
            raise NotEligible(
                f"grant {unknown[0]!r} is not configured (define it under [[grants]] or "
                "with Scheduler.grant)",
                code=PortCode.UNKNOWN_GRANT,
            )
        if grants:
            applied = with_grants(binding, [self.grants[name] for name in grants])
            binding = msgspec.structs.replace(applied, secrets_digest=self._digest(binding, grants))
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
