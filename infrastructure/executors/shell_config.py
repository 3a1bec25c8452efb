"""A shell binding's config: its validation, and the environment and secrets a launch
derives from it (see `shell.py`, "Config" and "Environment and input").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rota.application.errors import InvalidExecutorConfig
from rota.application.ports import LaunchContext

CONFIG_KEYS = ("command", "cwd", "environment", "launch_phases")
PHASES = ("executor",)  # the launch phases a shell binding may declare
INHERITED = ("PATH", "HOME", "LANG", "TMPDIR")
MAX_ENV_INPUT = 96 * 1024
MIN_SECRET = 6


def _text(value: Any) -> bool:
    return isinstance(value, str) and "\0" not in value


def variables_ok(env: Any) -> bool:
    """Whether `env` maps names (non-empty, without "=") to values, all str without NUL."""
    if not isinstance(env, dict):
        return False
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in env.items()):
        return False
    names = "".join(env)  # one scan of them all (str subclasses join as str)
    return "\0" not in names and "=" not in names and "\0" not in "".join(env.values())


def check_config(config: Any) -> None:
    """The rules a config must keep whatever the machine: `ShellExecutor.validate_config`."""
    if not isinstance(config, Mapping):
        raise InvalidExecutorConfig("", "must be an object with at least `command`")
    unknown = sorted(str(key) for key in config if key not in CONFIG_KEYS)
    if unknown:
        also = f" (also unknown: {unknown[1:]})" if len(unknown) > 1 else ""
        raise InvalidExecutorConfig(unknown[0], f"unknown key{also}; allowed: {list(CONFIG_KEYS)}")
    command = config.get("command")
    if isinstance(command, str):
        raise InvalidExecutorConfig(
            "command",
            "must be a list of strings, not a string: a list avoids shell-quoting "
            'surprises; use ["sh", "-c", "..."] to run a shell line',
        )
    if not isinstance(command, list) or not command:
        raise InvalidExecutorConfig("command", "must be a list of strings (non-empty)")
    if not all(_text(arg) for arg in command):
        raise InvalidExecutorConfig("command", "must be a list of strings without NUL characters")
    cwd = config.get("cwd")
    if cwd is not None and not _text(cwd):
        raise InvalidExecutorConfig("cwd", f"must be a directory's path, not {cwd!r}")
    if not variables_ok(config.get("environment") or {}):
        raise InvalidExecutorConfig("environment", "must be an object of strings to strings")
    phases = config.get("launch_phases", [])
    if not isinstance(phases, list) or not all(p in PHASES for p in phases):
        raise InvalidExecutorConfig("launch_phases", f"must be a list of {list(PHASES)}")


def parse_config(config: Any) -> tuple[list[str], str | None, dict[str, str], bool]:
    """Command, cwd, environment, and whether the `executor` launch phase is recorded."""
    check_config(config)
    cwd = config.get("cwd")
    if cwd is not None and not os.path.isdir(cwd):  # it may have gone since it was checked
        raise InvalidExecutorConfig("cwd", f"must name an existing directory, not {cwd!r}")
    phases = "executor" in config.get("launch_phases", ())
    return list(config["command"]), cwd, dict(config.get("environment") or {}), phases


def run_environment(ctx: LaunchContext, extra: dict[str, str], payload: bytes) -> dict[str, str]:
    env = {key: os.environ[key] for key in INHERITED if key in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(extra)
    env.update(ctx.env)
    env.update(
        ROTA_WORK_ID=ctx.work_id, ROTA_EXECUTION_ID=ctx.execution_id,
        ROTA_ATTEMPT=str(ctx.attempt), ROTA_EPOCH=str(ctx.epoch), ROTA_INPUT=payload.decode(),
    )  # fmt: skip
    if len(payload) > MAX_ENV_INPUT:
        del env["ROTA_INPUT"]
    # The W3C trace context of the attempt's span (rota[otel]), for the job's own spans.
    for header, variable in (("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE")):
        if ctx.trace.get(header):
            env[variable] = ctx.trace[header]
    return env


def run_secrets(ctx: LaunchContext) -> tuple[str, ...]:
    values = {v for v in ctx.env.values() if isinstance(v, str) and len(v) >= MIN_SECRET}
    return tuple(sorted(values, key=len, reverse=True))  # longest first
