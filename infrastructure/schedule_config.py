"""The `[[schedules]]` tables of `rota.toml`, validated at load.

```toml
[[schedules]]
name = "nightly-report"
binding = "report"
cron = "0 3 * * *"              # or every = "15m" (with offset = "5m")
timezone = "Europe/Berlin"      # IANA name; default UTC
input = { kind = "full" }       # the input template each fire carries
catchup = "latest"              # none | latest | all
catchup_window = "1h"
max_catchup = 100
overlap = "skip"                # skip | buffer_one | buffer_all | cancel_other | allow_all
jitter = "30s"
```

Each table is checked by the same domain validation `Scheduler.schedule()` uses, so a bad
spec is refused at load with its field path (`schedules[0].cron: ...`). Defining them is
an event per change: `rota schedule apply` (and `rota run` at start) applies them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rota.domain.errors import RotaError
from rota.domain.schedule_specs import check_name, define, parse_duration


class ScheduleModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    binding: str
    every: str | None = None
    offset: str | None = None
    cron: str | None = None
    timezone: str = "UTC"
    input: Any = None
    scope: str = "root"
    catchup: Literal["none", "latest", "all"] = "latest"
    catchup_window: str | int = "1h"
    max_catchup: int = Field(100, ge=1, le=10_000)
    overlap: Literal["skip", "buffer_one", "buffer_all", "cancel_other", "allow_all"] = "skip"
    jitter: str | int = 0

    def definition(self) -> dict[str, Any]:
        """The keyword arguments of `Scheduler.schedule(name, ...)`."""
        return self.model_dump(exclude={"name"})


def check_schedules(models: list[ScheduleModel], source: str) -> dict[str, dict[str, Any]]:
    """Validate every table (spec, zone, durations, unique names); name -> definition."""
    from rota.infrastructure.config import ConfigError

    found: dict[str, dict[str, Any]] = {}
    for index, model in enumerate(models):
        where = f"{source}: schedules[{index}]"
        field = "cron" if model.cron is not None else "every"
        try:
            check_name(model.name)
            define(every=model.every, cron=model.cron, offset=model.offset, timezone=model.timezone)
            for key in ("catchup_window", "jitter"):
                value = getattr(model, key)
                if isinstance(value, str):
                    parse_duration(value, key)
                elif value < 0:
                    raise ConfigError(f"{key} must be >= 0")
        except RotaError as exc:
            raise ConfigError(f"{where}.{field}: {exc}") from None
        if model.name in found:
            raise ConfigError(f"{where}.name: duplicate schedule name {model.name!r}")
        found[model.name] = model.definition()
    return found
