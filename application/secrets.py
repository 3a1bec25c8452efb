"""Binding secrets: taken out of the binding before it is pinned, resolved again at launch.

A binding's `environment` table (in `rota.toml`, `Scheduler.bind(config=...)` or
`register(config=...)`) holds values that must never reach the hash-chained log: the log
cannot be edited, so a secret written once stays there for ever. `split_secrets` takes the
table out of the binding's config and leaves a digest in its place
(`Binding.secrets_digest`); the values stay in the configuration composition (this
process's memory) and reach the executor at launch through `LaunchContext.env`, like the
run-environment hook's values (seed 001: secrets are not part of durable attempt snapshots).

The digest lets recovery tell that the values changed since an attempt was pinned, without
revealing them: it is scrypt (n=2^14, r=8), so guessing a short value from a copied log costs
tens of milliseconds a guess, not nanoseconds as a plain hash would.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import msgspec

from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.personal import check_paths
from rota.domain.policy import Binding

SECRET_KEYS = ("environment",)
PERSONAL_KEY = "personal"
_SALT = b"rota.binding.secrets/v1"


def split_secrets(binding: Binding, where: str | None = None) -> tuple[Binding, dict[str, str]]:
    """The binding as it may be pinned (secrets replaced by their digest), and the secrets.

    Raises `InvalidCommand` (`invalid_config`) when `environment` is not a table of
    variable names to strings, naming the field under `where` (the binding's path in its
    config file, `bindings[0]`; default `bindings.<name>`); the message never quotes a
    value.
    """
    if not any(key in binding.config for key in SECRET_KEYS):
        return binding, {}
    config = dict(binding.config)
    path = f"{where or 'bindings.' + binding.name}.environment"
    secrets = _variables(path, config.pop("environment"))
    digest = secrets_digest(secrets) if secrets else None
    return msgspec.structs.replace(binding, config=config, secrets_digest=digest), secrets


def split_personal(binding: Binding, where: str | None = None) -> tuple[Binding, tuple[str, ...]]:
    """The binding without its `personal` field paths (sealed at submit, never an executor's
    config: rota.application.personal), and the paths, checked (`invalid_personal`, naming
    the field under `where`)."""
    if PERSONAL_KEY not in binding.config:
        return binding, ()
    config = dict(binding.config)
    path = f"{where or 'bindings.' + binding.name}.personal"
    paths = check_paths(config.pop(PERSONAL_KEY), path)
    return msgspec.structs.replace(binding, config=config), paths


def grant_secrets(grant: str, environment: dict[str, str] | None) -> dict[str, str]:
    """A grant's `environment` values, checked as a binding's are (`invalid_config`, the
    message never quoting a value)."""
    return _variables(f"grants.{grant}.environment", environment)


def secrets_digest(secrets: dict[str, str]) -> str:
    """A slow, salted digest of the names and values (never the values themselves)."""
    return _digest(msgspec.json.encode(dict(sorted(secrets.items()))))


@functools.lru_cache(maxsize=256)
def _digest(canonical: bytes) -> str:
    return "scrypt1:" + hashlib.scrypt(canonical, salt=_SALT, n=2**14, r=8, p=1).hex()[:32]


def _variables(where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidCommand(
            f"{where} must be a table of variable names to strings, not {type(value).__name__}",
            code=DomainCode.INVALID_CONFIG,
        )
    for name, item in value.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise InvalidCommand(
                f"{where}: variable names must be non-empty strings without '=' or NUL",
                code=DomainCode.INVALID_CONFIG,
            )
        if not isinstance(item, str) or "\0" in item:
            raise InvalidCommand(
                f"{where}.{name} must be a string without NUL characters "
                f"(got {type(item).__name__}; the value is not shown)",
                code=DomainCode.INVALID_CONFIG,
            )
    return dict(value)
