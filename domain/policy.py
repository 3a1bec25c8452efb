"""The policies an attempt runs under: settings, bindings, retry and handoff policy.

These are plain frozen values. The configuration layer validates what people write and
builds them; the claim pins a `Pinned` snapshot of them into the attempt, so recovery,
control and retry keep using what the attempt started with after a reload.
"""

from typing import Any, Literal

import msgspec

from rota.domain.errors import DomainCode, InvalidCommand

MAX_RETRY_DELAYS = 100
DEFAULT_RETRY_DELAYS: tuple[float, ...] = (300.0, 600.0)
FOUR_ATTEMPT_EXTRA_DELAY = 900.0
POOL_AGENTS = "agents"
POOL_JOBS = "jobs"


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Bounded automatic retry: `max_attempts` failures in all, waiting `delays` between.

    With no explicit delays, 3 attempts wait 5 then 10 minutes, and an explicit 4-attempt
    policy adds 15 minutes. Up to 100 delays (101 attempts) may be configured.
    """

    max_attempts: int = 3
    delays: tuple[float, ...] | None = None
    terminal_on_exhaustion: bool = False
    retry_on_lost: bool = False

    def delay_after(self, failures: int) -> float | None:
        """Seconds to wait after the `failures`-th failure; None when the budget is spent."""
        if failures >= self.max_attempts:
            return None
        delays = self.effective_delays()
        return delays[min(failures, len(delays)) - 1]

    def effective_delays(self) -> tuple[float, ...]:
        if self.delays is not None:
            return self.delays
        if self.max_attempts >= 4:
            return (*DEFAULT_RETRY_DELAYS, FOUR_ATTEMPT_EXTRA_DELAY)
        return DEFAULT_RETRY_DELAYS

    def validate(self, where: str = "retry") -> None:
        if self.max_attempts < 1:
            raise InvalidCommand(
                f"{where}.max_attempts must be at least 1", code=DomainCode.INVALID_CONFIG
            )
        if self.delays is not None:
            if len(self.delays) > MAX_RETRY_DELAYS:
                raise InvalidCommand(
                    f"{where}.delays has {len(self.delays)} entries; at most "
                    f"{MAX_RETRY_DELAYS} are allowed ({MAX_RETRY_DELAYS + 1} attempts)",
                    code=DomainCode.INVALID_CONFIG,
                )
            if not self.delays and self.max_attempts > 1:
                raise InvalidCommand(
                    f"{where}.delays is empty but max_attempts is {self.max_attempts}",
                    code=DomainCode.INVALID_CONFIG,
                )
            if any(not d >= 0 for d in self.delays):
                raise InvalidCommand(f"{where}.delays must be >= 0", code=DomainCode.INVALID_CONFIG)


HandoffPolicy = Literal["stop", "continue"]
# What a definite failure to deliver an inject does with its input (pinned per attempt).
ControlFallback = Literal["queue", "drop"]


class Binding(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a Work runs on: an executor registration, its config, timeout and policies.

    `config` is the executor's own configuration (a shell command, a callable's options).
    Secrets and run environments are never part of it: they are resolved at launch and
    never written to the log. `secrets_digest` is a slow digest of the binding's
    `environment` table as it was when the binding was defined (None: it had none), so a
    pinned attempt can tell that the values changed without revealing them.
    """

    name: str
    executor: str
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    timeout_seconds: float | None = None
    retry: RetryPolicy = RetryPolicy()
    handoff: HandoffPolicy = "stop"
    control_fallback: ControlFallback = "queue"
    secrets_digest: str | None = None


class Registration(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An executor as registered: its name, capacity pool and capabilities."""

    name: str
    pool: str = POOL_AGENTS
    capabilities: tuple[str, ...] = ()


class Settings(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Scheduler-wide defaults (`[settings]` in rota.toml).

    Capacity pools (a limit of 0 is unbounded): `concurrency` bounds the `agents` pool,
    where every executor that declares no pool of its own runs; `job_concurrency` the
    `jobs` pool (the shell executor); `pool_limits[name]` any other pool an executor
    declares. An attempt counts only against its own pool. A declared pool without an
    entry in `pool_limits` is bounded by `concurrency` (its own slots, counted apart).
    """

    concurrency: int = 4
    job_concurrency: int = 4
    lease_seconds: float = 60.0
    timeout_seconds: float = 3600.0
    max_segments: int = 50
    crash_loop_limit: int = 5
    recovery_failure_limit: int = 3
    scope_limits: dict[str, int] = msgspec.field(default_factory=dict)
    pool_limits: dict[str, int] = msgspec.field(default_factory=dict)

    def pool_limit(self, pool: str) -> int:
        """How many attempts of `pool` may hold a slot at once; 0: unbounded."""
        if pool in self.pool_limits:
            return self.pool_limits[pool]
        return self.job_concurrency if pool == POOL_JOBS else self.concurrency

    def pool_code(self, pool: str) -> DomainCode:
        """The code of the setting that bounds `pool`: what a start it holds back waits on."""
        if pool in self.pool_limits:
            return DomainCode.CAPACITY_POOL
        if pool == POOL_JOBS:
            return DomainCode.CAPACITY_JOB_CONCURRENCY
        return DomainCode.CAPACITY_CONCURRENCY


class Pinned(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The attempt snapshot: everything the attempt keeps using after a reload."""

    generation: str
    binding: Binding
    registration: Registration
    timeout_seconds: float
    lease_seconds: float
    max_segments: int = 50
