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
priority = 5                    # flow control of the Works its fires create
keys = ["tenant:acme"]
```

Each table is checked by the same domain validation `Scheduler.schedule()` uses, so a bad
spec is refused at load with its field path (`schedules[0].cron: ...`). Defining them is
an event per change: `rota schedule apply` (and `rota run` at start) applies them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rota.domain.errors import RotaError
from rota.domain.flow import check_keys, check_priority
from rota.domain.results import check_payload
from rota.domain.schedule_specs import check_name, define, parse_duration, zone


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
    priority: int = 0
    keys: list[str] = []

    def definition(self) -> dict[str, Any]:
        """The keyword arguments of `Scheduler.schedule(name, ...)`."""
        return self.model_dump(exclude={"name"})


def check_schedules(models: list[ScheduleModel], source: str) -> dict[str, dict[str, Any]]:
    """Validate every table (spec, zone, durations, unique names); name -> definition.

    Every bad table is named, with the field that is wrong (`schedules[1].timezone: unknown
    time zone ...`), in one `invalid_config` message, the first one first."""
    from rota.infrastructure.config import ConfigError

    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for index, model in enumerate(models):
        where = f"schedules[{index}]"
        problem = _problem(model)
        if problem is not None:
            problems.append(f"{where}.{problem[0]}: {problem[1]}")
        elif model.name in found:
            problems.append(f"{where}.name: duplicate schedule name {model.name!r}")
        else:
            found[model.name] = model.definition()
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return found


def _problem(model: ScheduleModel) -> tuple[str, str] | None:
    """The first wrong field of one table and what is wrong with it, or None."""
    try:
        check_name(model.name)
    except RotaError as exc:
        return "name", str(exc)
    try:
        zone(model.timezone)
    except RotaError as exc:
        return "timezone", str(exc)
    spec_field = "cron" if model.cron is not None else "every"
    try:
        define(every=model.every, cron=model.cron, offset=model.offset, timezone=model.timezone)
    except RotaError as exc:
        field = "offset" if model.offset is not None and "offset" in str(exc) else spec_field
        return field, str(exc)
    for key in ("catchup_window", "jitter"):
        value = getattr(model, key)
        try:
            if isinstance(value, str):
                parse_duration(value, key)
            elif value < 0:
                return key, f"{key} must be >= 0"
        except RotaError as exc:
            return key, str(exc)
    try:
        check_payload(model.input, "schedule input")
    except RotaError as exc:
        return "input", str(exc)
    for name, check in (("priority", check_priority), ("keys", check_keys)):
        try:
            check(getattr(model, name))
        except RotaError as exc:
            return name, str(exc)
    return None


def unknown_bindings(models: list[ScheduleModel], bindings: Collection[str]) -> list[str]:
    """The tables whose binding is not in `bindings` (those a `rota run` of this config
    has): `schedules[1].binding: ...` each. `rota config validate` refuses them; a schedule
    whose binding its runner does not know is quarantined when it is due."""
    known = ", ".join(sorted(bindings)) or "none"
    return [
        f"schedules[{index}].binding: no [[bindings]] table defines {model.binding!r} "
        f"(defined: {known}); its fires would be quarantined"
        for index, model in enumerate(models)
        if model.binding not in bindings
    ]
