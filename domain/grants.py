"""Binding grants (seed 001): named extra config a Work opts into at submit.

A grant (`[[grants]]` in rota.toml, `Scheduler.grant(...)` embedded) is a name, a `config`
table merged over the binding's config, and an `environment` table of variables handed to
the launch. A Work opts in by name (`submit(..., grants=["s3-write"])`); the attempt pins
its binding with the grants' config applied, in the Work's order (a later grant's key
replaces an earlier one's and the binding's), and `AttemptClaimed.grants` names them, so
recovery and resume launch with what the attempt took.

Like a binding's, a grant's `environment` values are secrets: they are never pinned or
written to the log; the pinned binding's `secrets_digest` covers them (by digest only) and
the values are resolved again at each launch (rota.application.secrets). Everything in
`config` is pinned, so it is in the log: a grant names a secret by the variable it sets,
never by putting its value in `config`.
"""

from collections.abc import Sequence
from typing import Any

import msgspec

from rota.domain.errors import DomainCode, InvalidCommand
from rota.domain.policy import Binding
from rota.domain.submission import GRANT


class Grant(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A grant as it may be pinned: its name and its (non-secret) config."""

    name: str
    config: dict[str, Any] = msgspec.field(default_factory=dict)


def check_grant(grant: Grant) -> Grant:
    """Refuse (`invalid_config`) a grant whose name is malformed or whose config holds an
    `environment` table (a grant's variables are its own `environment`, kept out of the
    log); return it."""
    if type(grant.name) is not str or not GRANT.fullmatch(grant.name):
        raise InvalidCommand(
            f"grant name {str(grant.name)[:80]!a} must match {GRANT.pattern}",
            code=DomainCode.INVALID_CONFIG,
        )
    if not isinstance(grant.config, dict) or not all(type(k) is str for k in grant.config):
        raise InvalidCommand(
            f"grants.{grant.name}.config must be a table", code=DomainCode.INVALID_CONFIG
        )
    if "environment" in grant.config:
        raise InvalidCommand(
            f"grants.{grant.name}.config cannot hold `environment`: give the grant's "
            "variables as its own `environment` table (never written to the log)",
            code=DomainCode.INVALID_CONFIG,
        )
    return grant


def with_grants(binding: Binding, grants: Sequence[Grant]) -> Binding:
    """`binding` with each grant's config applied over its own, in order."""
    if not grants:
        return binding
    config = dict(binding.config)
    for grant in grants:
        config.update(grant.config)
    return msgspec.structs.replace(binding, config=config)
