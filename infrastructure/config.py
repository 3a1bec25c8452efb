"""The configuration file (`rota.toml`): loaded, validated (by the pydantic models of
rota.infrastructure.config_models) and shown.

```toml
[store]
url = "sqlite:////var/lib/rota/rota.db"  # or sqlite:///relative, a path, postgresql://...
synchronous = "full"                      # full (default), normal, extra
reply_timeout = 30                        # PostgreSQL: drop a connection unanswered this long

[settings]
concurrency = 4          # agent turns and executors without a pool (0: unbounded)
job_concurrency = 4      # the jobs pool (shell; 0: unbounded)
pool_limits = { gpu = 2 }   # any other pool an executor declares (0: unbounded)
lease_seconds = 60
timeout_seconds = 3600

[app]
module = "myjobs.tasks:register"   # rota run imports it and calls register(scheduler)

[[bindings]]
name = "report"
executor = "shell"
command = ["sh", "-c", "./report.sh"]   # executor-specific keys become the binding config
timeout_seconds = 600
control_fallback = "queue"              # a failed inject queues its input (or "drop")
[bindings.retry]
max_attempts = 3
delays = [300, 600]

[[grants]]                      # a Work opts in at submit: grants = ["s3-write"]
name = "s3-write"
config = { bucket = "reports" }                 # merged over the binding's config (logged)
environment = { AWS_PROFILE = "writer" }        # handed to the launch, never logged

[[scopes]]
path = "root/team"
limits = { concurrency = 2 }   # this scope and its descendants, every pool counted

[audit]
checkpoint_dir = "/var/lib/rota/checkpoints"   # outside the store's file; see docs/auditor.md
key = "/etc/rota/audit-key.pem"                # optional: sign checkpoints (Ed25519)

[http]                          # rota serve, rota run --http (docs/http.md)
listen = "127.0.0.1:8470"       # loopback by default
tokens = "rota-tokens.json"     # bearer tokens (0600), made by `rota token add`
allowed_hosts = []              # Host names accepted besides the loopback ones
metrics_series_budget = 1024    # /metrics never exports more series than this

[[budgets]]                     # at most 50 usd per Work per UTC day, warn at 80 %
unit = "usd"                    # no id: named usd-work-day, so changing max keeps the ledger
max = 50
per = "work"                    # work, scope or all
period = "day"                  # lifetime, day or week
warn_at = 0.8

[[keys]]                        # flow control (docs/guide.md, "Flow control")
key = "tenant:*"                # every tenant:<name> key, each counted on its own
concurrency = 2                 # at most 2 live attempts per tenant
weight = 1                      # fair share between tenants (tenant:big weight 3 ...)

[[rates]]
key = "resource:stripe"         # a key, a prefix (tenant:*) or pool:<name>
rate = "100/min"                # tokens a period; a start takes its Work's cost (1)
burst = 10                      # the bucket holds at most this many

[[schedules]]                   # see rota.infrastructure.schedule_config and docs/schedules.md
name = "nightly"
binding = "report"
cron = "0 3 * * *"
timezone = "Europe/Berlin"
```

Every error names the field path (`bindings[0].retry.delays: ...`) and what was wrong.
Executor-specific keys of a binding (`command`, `cwd`, `environment` ...) are kept as the
binding's config, checked by the executor's `validate_config` (`bindings[0].command: ...`)
when it is a built-in one; an executor registered later in process checks its bindings
when it is registered (`rota.Scheduler.register`), and `check_executors` refuses a binding
whose executor is not registered at all (`unknown_executor`). `environment` values are
passed to the process at launch and never written to the log: the pinned binding keeps
only their digest (rota.application.secrets).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rota.application.errors import InvalidExecutorConfig, PortCode
from rota.application.ports import Executor
from rota.application.secrets import SECRET_KEYS, grant_secrets, split_personal, split_secrets
from rota.domain.errors import DomainCode, ErrorCode, InvalidCommand, RotaError
from rota.domain.events.admission import Budget
from rota.domain.events.flow import FlowConfigured, ScopeShare
from rota.domain.flow import check_rules
from rota.domain.grants import Grant, check_grant
from rota.domain.policy import POOL_AGENTS, POOL_JOBS, Binding, Settings
from rota.domain.submission import BINDING
from rota.infrastructure.config_models import (
    AuditModel,
    BindingModel,
    BudgetModel,
    ConfigModel,
    GrantModel,
    HistoricalModel,
    HttpModel,
    RetryModel,
    ScopeLimitsModel,
    ScopeModel,
    SettingsModel,
    StoreModel,
)
from rota.infrastructure.executors import builtin_executor_types
from rota.infrastructure.schedule_config import check_schedules

DEFAULT_CONFIG = Path("rota.toml")
POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# `[app] module` and `rota run --app`: `package.module:function` (fullmatch).
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
APP_SPEC = re.compile(rf"{_NAME}(?:\.{_NAME})*:{_NAME}(?:\.{_NAME})*")
# The two pools with settings of their own: `pool_limits` names neither.
RESERVED_POOLS = {POOL_AGENTS: "concurrency", POOL_JOBS: "job_concurrency"}


class EntryCode(ErrorCode):
    """The entry points' codes: the configuration file, the CLI and the `rota.open` facade.

    A bad configuration value is the domain's `invalid_config` (the domain validates
    budgets and retry policies too), so only what the entry points add is here."""

    USAGE = "usage"
    """A command was called wrongly (options, names, ranges): see `rota <command> --help`."""
    TIMEOUT = "timeout"
    """`Scheduler.run_until_idle(timeout=...)` was still busy when the timeout passed."""
    CANNOT_READ = "cannot_read"
    """A file the command was given could not be read (missing, no permission): fix the path."""
    CANNOT_WRITE = "cannot_write"
    """An output file could not be created (a missing directory, no permission): fix the path."""
    STORE_IN_MEMORY = "store_in_memory"
    """A `rota` command other than `rota run` was given a `memory://` store, which lives only
    as long as the process that opened it: anything it wrote would be gone when it exits,
    and nothing another command wrote is there. Use `memory://` from Python (`rota.open`,
    users' own tests) or with `rota run`; give other commands a file or PostgreSQL store."""
    NO_CONFIG_FILE = "no_config_file"
    """`rota schedule apply --prune` read no config file (no `--config`, no `$ROTA_CONFIG`
    and no ./rota.toml), so it would remove every schedule a config defined: name the file
    (`--config FILE`)."""
    APP_INVALID = "app_invalid"
    """`--app` or `[app] module` is not `package.module:attribute` (dotted Python names,
    one colon): write it as that."""
    APP_NOT_FOUND = "app_not_found"
    """The `--app` module cannot be found (check the name, the current directory and
    PYTHONPATH), or it has no such attribute."""
    APP_NOT_CALLABLE = "app_not_callable"
    """The `--app` attribute is not a plain function taking the scheduler (a class instance
    without `__call__`, a constant, an `async def`): point at `register(scheduler)`."""
    APP_FAILED = "app_failed"
    """Importing the `--app` module, or calling its function, raised: the message names the
    exception's type and where; run `python -c "import MODULE"` to see the traceback."""


class ConfigError(RotaError):
    code = DomainCode.INVALID_CONFIG


class Config:
    """A validated configuration."""

    def __init__(self, model: ConfigModel, source: str = "<defaults>") -> None:
        names = [b.name for b in model.bindings]
        again = next((i for i, n in enumerate(names) if n in names[:i]), None)
        if again is not None:
            first = names.index(names[again])
            raise ConfigError(
                f"{source}: bindings[{again}].name: duplicate binding name {names[again]!r} "
                f"(bindings[{first}] has it too)"
            )
        self.source = source
        self.model = model
        self.store_url = model.store.url
        self.audit = model.audit
        self.http = model.http
        self.app = model.app.module  # `[app] module`: what `rota run` loads (rota.cli.app)
        if self.app is not None and not APP_SPEC.fullmatch(self.app):
            raise ConfigError(
                f"{source}: app.module: {self.app[:80]!a} is not 'package.module:function' "
                "(dotted Python names and one colon)"
            )
        self.synchronous = model.store.synchronous
        self.reply_timeout = model.store.reply_timeout
        s = model.settings
        for pool in s.pool_limits:
            if pool in RESERVED_POOLS:
                raise ConfigError(
                    f"{source}: settings.pool_limits.{pool}: the {pool} pool is bounded by "
                    f"settings.{RESERVED_POOLS[pool]}; set that instead"
                )
            if not POOL_NAME.fullmatch(pool):
                raise ConfigError(
                    f"{source}: settings.pool_limits: pool name {pool!r} must match "
                    f"{POOL_NAME.pattern}"
                )
        self.settings = Settings(
            concurrency=s.concurrency,
            job_concurrency=s.job_concurrency,
            lease_seconds=s.lease_seconds,
            timeout_seconds=s.timeout_seconds,
            max_segments=s.max_segments,
            crash_loop_limit=s.crash_loop_limit,
            recovery_failure_limit=s.recovery_failure_limit,
            pool_limits=dict(s.pool_limits),
            scope_limits={
                scope.path: scope.limits.concurrency
                for scope in model.scopes
                if scope.limits.concurrency is not None
            },
        )
        self.budgets: tuple[Budget, ...] = tuple(b.to_budget() for b in model.budgets)
        ids = [b.id for b in self.budgets]
        again = next((i for i, b in enumerate(ids) if b in ids[:i]), None)
        if again is not None:
            raise ConfigError(
                f"{source}: budgets[{again}]: budgets[{ids.index(ids[again])}] is "
                f"{ids[again]!r} too (a budget without an id is named by its unit, per, period "
                "and scope); give them ids"
            )
        self.flow = _flow(model, source)
        # generation -> the registrations whose current implementation serves it (None: all)
        self.historical: dict[str, frozenset[str] | None] = {
            h.generation: None if h.executors is None else frozenset(h.executors)
            for h in model.historical
        }
        self.bindings: dict[str, Binding] = {b.name: b.to_binding() for b in model.bindings}
        # Where each binding is written, for messages: `bindings[0]`.
        self.binding_paths = {b.name: f"bindings[{i}]" for i, b in enumerate(model.bindings)}
        self.schedules = check_schedules(model.schedules, source)  # schedule_api applies them
        self.grants = _grants(model, source)
        builtin = builtin_executor_types()
        for name, binding in self.bindings.items():
            # A built-in executor's rules are known now; an executor registered in process
            # later (a callable) checks its bindings when it is registered.
            executor = builtin.get(binding.executor)
            check_binding(binding, executor, self.binding_paths[name], source)

    def check_executors(self, registered: Collection[str]) -> None:
        """Refuse a binding naming an executor that is not in `registered`
        (`unknown_executor`, with the binding's field path)."""
        for name, binding in self.bindings.items():
            if binding.executor not in registered:
                raise unknown_executor(binding, registered, self.binding_paths[name], self.source)

    @classmethod
    def parse(cls, data: dict[str, Any], source: str = "<config>") -> Config:
        try:
            model = ConfigModel.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {describe(exc)}") from None
        return cls(model, source)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, *, required: bool = False) -> Config:
        """Read `path` (default ./rota.toml); a missing default file gives the defaults."""
        file = Path(path) if path is not None else DEFAULT_CONFIG
        if not file.exists():
            if required or path is not None:
                raise ConfigError(f"config file {file} does not exist")
            return cls(ConfigModel())
        try:
            data = tomllib.loads(file.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{file}: not UTF-8 ({exc.reason} at byte {exc.start}); TOML files are UTF-8"
            ) from None
        except ValueError as exc:  # TOMLDecodeError, and an integer over the digit limit
            raise ConfigError(f"{file}: not valid TOML: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{file}: not valid TOML: nested too deep") from None
        except OSError as exc:
            raise ConfigError(f"{file}: cannot read: {exc.strerror}") from None
        return cls.parse(data, str(file))


REDACTED = "<redacted>"


def shown(model: BaseModel, prefix: str = "") -> list[tuple[str, Any, str]]:
    """Every value of a validated config as `(key, value, origin)`, origin `file` when the
    file set it and `default` otherwise (`rota config show`). A binding's and a grant's
    `environment` values are replaced by `<redacted>`: they are secrets, never shown."""
    rows: list[tuple[str, Any, str]] = []
    given = model.model_fields_set
    fields = [(name, getattr(model, name), name in given) for name in type(model).model_fields]
    fields += [(name, value, True) for name, value in (model.model_extra or {}).items()]
    for name, value, from_file in fields:
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            rows += _inherit(shown(value, f"{key}."), from_file)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            for i, item in enumerate(value):
                rows += shown(item, f"{key}[{i}].")
        else:
            if name in SECRET_KEYS and isinstance(model, BindingModel | GrantModel):
                secret = isinstance(value, dict)
                value = dict.fromkeys(value, REDACTED) if secret else REDACTED  # noqa: PLW2901
            rows.append((key, value, "file" if from_file else "default"))
    return rows


def _inherit(rows: list[tuple[str, Any, str]], from_file: bool) -> list[tuple[str, Any, str]]:
    """A table the file did not write at all is the defaults, whatever its model says."""
    return rows if from_file else [(key, value, "default") for key, value, _ in rows]


def _grants(model: ConfigModel, source: str) -> dict[str, tuple[Grant, dict[str, str]]]:
    """`[[grants]]`: each grant (its pinnable part) and its environment values, checked."""
    grants: dict[str, tuple[Grant, dict[str, str]]] = {}
    for index, item in enumerate(model.grants):
        where = f"{source}: grants[{index}]"
        if item.name in grants:
            raise ConfigError(f"{where}.name: duplicate grant name {item.name!r}")
        try:
            grant = check_grant(Grant(name=item.name, config=dict(item.config)))
            environment = grant_secrets(item.name, dict(item.environment))
        except InvalidCommand as exc:
            raise ConfigError(f"{where}: {exc}") from None
        grants[item.name] = (grant, environment)
    return grants


def check_binding_name(name: str) -> None:
    """Refuse (`invalid_config`) a binding name the config file would refuse: one to 64
    letters, digits, dots, underscores and hyphens (a whole match: no trailing newline)."""
    if not isinstance(name, str) or not BINDING.fullmatch(name):
        raise ConfigError(
            f"binding name {str(name)[:80]!a}: one to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def check_binding(
    binding: Binding, executor: type[Executor] | Executor | None, where: str, source: str = ""
) -> None:
    """Refuse a binding whose `environment` is malformed, or whose config its executor (when
    known) refuses, naming the field under `where` (`bindings[0].command: ...`)."""
    prefix = f"{source}: " if source else ""
    try:
        binding, _ = split_personal(binding, where)  # malformed personal paths now
        pinnable, _ = split_secrets(binding, where)  # a malformed environment now
    except InvalidCommand as exc:
        raise ConfigError(f"{prefix}{exc}") from None
    if executor is None:
        return
    try:
        executor.validate_config(pinnable.config)
    except InvalidExecutorConfig as exc:
        raise ConfigError(f"{prefix}{exc.at(where)}{_own_key_hint(exc, binding)}") from None


def _own_key_hint(exc: InvalidExecutorConfig, binding: Binding) -> str:
    """For a key the executor does not know: a binding's own keys are allowed beside it
    too, and the one it was probably meant to be (`timeout` -> `timeout_seconds`)."""
    if not exc.field or exc.field not in binding.config or "unknown key" not in exc.problem:
        return ""
    own = sorted(BindingModel.model_fields)
    hint = f" (the {binding.executor} executor's), or a binding's own: {', '.join(own)}"
    near = difflib.get_close_matches(exc.field, own, n=1, cutoff=0.6)
    return hint + (f"; did you mean {near[0]!r}?" if near else "")


def unknown_executor(
    binding: Binding, registered: Collection[str], where: str, source: str = ""
) -> ConfigError:
    """The refusal of a binding whose executor is not registered (`unknown_executor`)."""
    prefix = f"{source}: " if source else ""
    known = ", ".join(sorted(registered)) or "none"
    return ConfigError(
        f"{prefix}{where}.executor: no executor {binding.executor!r} is registered in this "
        f"process (registered: {known})",
        code=PortCode.UNKNOWN_EXECUTOR,
    )


def describe(exc: ValidationError) -> str:
    """Pydantic errors as `field.path: message`, first error first."""
    parts = []
    for error in exc.errors():
        path = ""
        for item in error["loc"]:
            path += f"[{item}]" if isinstance(item, int) else (f".{item}" if path else str(item))
        parts.append(f"{path or '(top level)'}: {error['msg']}")
    return "; ".join(parts)


# The section models are declared in rota.infrastructure.config_models; importers of
# rota.infrastructure.config keep finding them here.
__all__ = [
    "DEFAULT_CONFIG",
    "REDACTED",
    "AuditModel",
    "BindingModel",
    "BudgetModel",
    "Config",
    "ConfigError",
    "ConfigModel",
    "EntryCode",
    "HistoricalModel",
    "HttpModel",
    "RetryModel",
    "ScopeLimitsModel",
    "ScopeModel",
    "SettingsModel",
    "StoreModel",
    "check_binding",
    "describe",
    "shown",
    "unknown_executor",
]


def _flow(model: ConfigModel, source: str) -> FlowConfigured:
    """`[[keys]]`, `[[rates]]` and `[settings] starvation_share`, checked as the domain
    checks them (`invalid_flow` words, with the source)."""
    keys = [k.to_rule() for k in model.keys]
    rates = [r.to_rule() for r in model.rates]
    share = model.settings.starvation_share
    scopes = [ScopeShare(path=s.path, weight=s.weight) for s in model.scopes if s.weight]
    try:
        check_rules(keys, rates, share, scopes)
    except InvalidCommand as exc:
        raise ConfigError(f"{source}: {exc.message}") from None
    return FlowConfigured(keys=keys, rates=rates, share=share, scopes=scopes)
