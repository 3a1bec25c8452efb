"""The pydantic models of the configuration file's sections (`[store]`, `[settings]`,
`[[bindings]]`, `[[scopes]]`, `[[budgets]]`, `[[keys]]`, `[[rates]]`, `[audit]`, `[http]`,
`[[historical]]`, `[[schedules]]`): each field's type, default and bounds;
rota.infrastructure.config loads a file through them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rota.domain.budgets import BUDGET_ID, derived_id
from rota.domain.errors import InvalidCommand
from rota.domain.events.admission import Budget
from rota.domain.events.flow import KeyRule, RateRule
from rota.domain.flow import DEFAULT_SHARE, MAX_COST, RULE_KEY, parse_rate
from rota.domain.policy import MAX_RETRY_DELAYS, Binding, RetryPolicy
from rota.domain.submission import BINDING
from rota.infrastructure.schedule_config import ScheduleModel


class StoreModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = "sqlite:///rota.db"
    synchronous: Literal["full", "normal", "extra"] = "full"
    # PostgreSQL: seconds a statement may go unanswered before its connection is dropped
    # (a half-open connection, a frozen server); None: the store's default (30)
    reply_timeout: float | None = Field(None, gt=0, le=3600)


PoolLimit = Annotated[int, Field(ge=0, le=10_000)]


class SettingsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    concurrency: int = Field(4, ge=0, le=10_000)
    job_concurrency: int = Field(4, ge=0, le=10_000)
    pool_limits: dict[str, PoolLimit] = {}
    lease_seconds: float = Field(60.0, gt=0, le=86_400)
    timeout_seconds: float = Field(3600.0, gt=0)
    max_segments: int = Field(50, ge=1, le=1000)
    crash_loop_limit: int = Field(5, ge=1, le=1000)
    recovery_failure_limit: int = Field(3, ge=1, le=1000)
    # Of every `starvation_share` starts, one goes to the oldest ready Work (0: off).
    starvation_share: int = Field(DEFAULT_SHARE, ge=0, le=1000)


class RetryModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(3, ge=1, le=MAX_RETRY_DELAYS + 1)
    delays: list[float] | None = Field(None, max_length=MAX_RETRY_DELAYS)
    terminal_on_exhaustion: bool = False
    retry_on_lost: bool = False

    @field_validator("delays")
    @classmethod
    def _non_negative(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and any(d < 0 for d in value):
            raise ValueError("every delay must be >= 0 seconds")
        return value


class BindingModel(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=BINDING.pattern)
    executor: str = Field(min_length=1)
    timeout_seconds: float | None = Field(None, gt=0)
    retry: RetryModel = RetryModel()
    handoff: Literal["stop", "continue"] = "stop"
    control_fallback: Literal["queue", "drop"] = "queue"

    def to_binding(self) -> Binding:
        config = dict(self.model_extra or {})
        retry = self.retry
        return Binding(
            name=self.name,
            executor=self.executor,
            config=config,
            timeout_seconds=self.timeout_seconds,
            retry=RetryPolicy(
                max_attempts=retry.max_attempts,
                delays=tuple(retry.delays) if retry.delays is not None else None,
                terminal_on_exhaustion=retry.terminal_on_exhaustion,
                retry_on_lost=retry.retry_on_lost,
            ),
            handoff=self.handoff,
            control_fallback=self.control_fallback,
        )


class GrantModel(BaseModel):
    """`[[grants]]`: a binding grant a Work may opt into at submit (rota.domain.grants).
    `config` is merged over the binding's config and pinned (it is in the log: no secret
    values); `environment` is handed to the launch like a binding's and never written."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=BINDING.pattern)
    config: dict[str, Any] = {}
    environment: dict[str, str] = {}


class ScopeLimitsModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    concurrency: int | None = Field(None, ge=1)


class ScopeModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
    limits: ScopeLimitsModel = ScopeLimitsModel()
    # Fair share: the Works without keys at or under `path` form one flow of this weight.
    weight: int | None = Field(None, ge=1, le=1000)


class BudgetModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, pattern=BUDGET_ID.pattern)
    unit: str = Field(min_length=1)
    max: float = Field(gt=0)
    per: Literal["work", "scope", "all"] = "work"
    period: Literal["lifetime", "day", "week"] = "lifetime"
    scope: str | None = None
    warn_at: float | None = Field(None, gt=0, lt=1)

    @model_validator(mode="after")
    def _scope_on_all(self) -> BudgetModel:
        if self.per == "all" and self.scope is not None:
            raise ValueError(
                'scope cannot narrow a per = "all" budget: its ledger is shared by every scope'
            )
        return self

    def to_budget(self) -> Budget:
        """The budget; without an `id`, named by unit, per, period and scope (not `max`,
        so a changed limit keeps its ledgers: `rota.domain.budgets.derived_id`)."""
        budget = Budget(
            id=self.id or "",
            unit=self.unit,
            max=self.max,
            per=self.per,
            period=self.period,
            scope=self.scope,
            warn_at=self.warn_at,
        )
        return budget if self.id else msgspec.structs.replace(budget, id=derived_id(budget))


class KeyModel(BaseModel):
    """`[[keys]]`: a concurrency key or a prefix of keys (`tenant:*`), its concurrency
    limit (each key of a prefix counted on its own) and its fair-share weight."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(pattern=RULE_KEY.pattern)
    concurrency: int | None = Field(None, ge=0, le=1_000_000)
    weight: int | None = Field(None, ge=1, le=1000)

    def to_rule(self) -> KeyRule:
        return KeyRule(key=self.key, concurrency=self.concurrency, weight=self.weight)


class RateModel(BaseModel):
    """`[[rates]]`: a token bucket on a key, a prefix of keys or `pool:<name>`:
    `rate = "100/min"`, holding at most `burst` tokens."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(pattern=RULE_KEY.pattern)
    rate: str
    burst: int = Field(1, ge=1, le=MAX_COST)

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str) -> str:
        try:
            parse_rate(value)
        except InvalidCommand as exc:
            raise ValueError(exc.message) from None
        return value

    def to_rule(self) -> RateRule:
        count, period = parse_rate(self.rate)
        return RateRule(key=self.key, count=count, period=period, burst=self.burst)


class AuditModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checkpoint_dir: str | None = None
    # Where `rota retention run` archives what it prunes (`--archive` overrides it). Here and
    # not in a `[retention]` table: TOML cannot have both `[retention]` and `[[retention]]`.
    archive_dir: str | None = None
    key: str | None = None
    every_events: int = Field(1000, ge=1)
    every_seconds: float = Field(300.0, gt=0)


class RetentionModel(BaseModel):
    """`[[retention]]`: a policy: the terminal Works of `scope` (or under it), `binding`
    and/or `schedule` (fired by it) lose their payloads `keep_days` after their last event
    (docs/operator.md)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")
    keep_days: float = Field(gt=0)
    scope: str | None = None
    binding: str | None = None
    schedule: str | None = None
    keep: Literal["summary"] = "summary"


class HttpModel(BaseModel):
    """`[http]`: the API of `rota serve` and `rota run --http` (docs/http.md)."""

    model_config = ConfigDict(extra="forbid")
    listen: str = "127.0.0.1:8470"
    tokens: str = "rota-tokens.json"
    allowed_hosts: list[str] = []
    max_body_bytes: int = Field(1_048_576, ge=1024, le=64 * 1_048_576)
    metrics_series_budget: int = Field(1024, ge=1, le=1_000_000)
    scope_depth: int = Field(2, ge=1, le=16)


class HistoricalModel(BaseModel):
    """An older configuration generation whose attempts the current executors may serve."""

    model_config = ConfigDict(extra="forbid")
    generation: str = Field(pattern=r"^[0-9a-f]{12}$")
    executors: list[str] | None = None  # None: every registration


class AppModel(BaseModel):
    """`[app]`: the Python module `rota run` loads to register its callables (rota.cli.app)."""

    model_config = ConfigDict(extra="forbid")
    module: str | None = None  # "package.module:function", checked by `Config` (APP_SPEC)


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    app: AppModel = AppModel()
    audit: AuditModel = AuditModel()
    store: StoreModel = StoreModel()
    settings: SettingsModel = SettingsModel()
    bindings: list[BindingModel] = []
    grants: list[GrantModel] = []
    scopes: list[ScopeModel] = []
    budgets: list[BudgetModel] = []
    keys: list[KeyModel] = []
    rates: list[RateModel] = []
    historical: list[HistoricalModel] = []
    http: HttpModel = HttpModel()
    schedules: list[ScheduleModel] = []
    retention: list[RetentionModel] = []


__all__ = [
    "AppModel",
    "AuditModel",
    "BindingModel",
    "BudgetModel",
    "ConfigModel",
    "GrantModel",
    "HistoricalModel",
    "HttpModel",
    "KeyModel",
    "PoolLimit",
    "RateModel",
    "RetentionModel",
    "RetryModel",
    "ScopeLimitsModel",
    "ScopeModel",
    "SettingsModel",
    "StoreModel",
]
