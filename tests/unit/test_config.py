"""The configuration file: what it accepts, and the field path of what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from rota.infrastructure.config import Config, ConfigError


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        Config.parse(data)
    assert caught.value.code == "invalid_config"
    return caught.value.message


# -- capacity pools ----------------------------------------------------------------------


def test_pool_limits_name_any_pool_and_zero_is_unbounded() -> None:
    settings = Config.parse(
        {"settings": {"concurrency": 0, "job_concurrency": 3, "pool_limits": {"gpu": 2, "io": 0}}}
    ).settings
    limits = {pool: settings.pool_limit(pool) for pool in ("agents", "jobs", "gpu", "io", "x")}
    assert limits == {"agents": 0, "jobs": 3, "gpu": 2, "io": 0, "x": 0}


def test_without_pool_limits_the_defaults_are_unchanged() -> None:
    settings = Config.parse({}).settings
    assert settings.pool_limits == {}
    limits = {pool: settings.pool_limit(pool) for pool in ("agents", "jobs", "gpu")}
    assert limits == {"agents": 4, "jobs": 4, "gpu": 4}


@pytest.mark.parametrize(
    ("pool_limits", "message"),
    [
        ({"gpu": -1}, "settings.pool_limits.gpu: Input should be greater than or equal to 0"),
        ({"gpu": "two"}, "settings.pool_limits.gpu: Input should be a valid integer"),
        ({"jobs": 2}, "settings.pool_limits.jobs: the jobs pool is bounded by "),
        ({"agents": 2}, "settings.pool_limits.agents: the agents pool is bounded by "),
        ({"a b": 2}, "settings.pool_limits: pool name 'a b' must match"),
    ],
)
def test_bad_pool_limits_are_refused_with_their_field_path(
    pool_limits: dict[str, Any], message: str
) -> None:
    assert message in refused({"settings": {"pool_limits": pool_limits}})


def test_a_negative_concurrency_is_refused() -> None:
    assert "settings.concurrency" in refused({"settings": {"concurrency": -1}})


# -- bindings ----------------------------------------------------------------------------

SHELL = {"name": "report", "executor": "shell", "command": ["true"]}


def test_a_binding_sets_its_control_fallback_and_it_is_not_executor_config() -> None:
    bindings = Config.parse(
        {"bindings": [{**SHELL, "control_fallback": "drop"}, {**SHELL, "name": "b"}]}
    ).bindings
    assert bindings["report"].control_fallback == "drop"
    assert bindings["report"].config == {"command": ["true"]}
    assert bindings["b"].control_fallback == "queue"  # the default


def test_a_control_fallback_other_than_queue_or_drop_is_refused() -> None:
    message = refused({"bindings": [{**SHELL, "control_fallback": "retry"}]})
    assert "bindings[0].control_fallback: Input should be 'queue' or 'drop'" in message


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        ({"command": "./report.sh"}, "bindings[1].command: must be a list of strings, not a"),
        ({"command": []}, "bindings[1].command: must be a list of strings (non-empty)"),
        ({"command": ["true"], "comand": ["x"]}, "bindings[1].comand: unknown key; allowed"),
        ({"command": ["true"], "cwd": 7}, "bindings[1].cwd: must be a directory's path"),
        ({}, "bindings[1].command: must be a list of strings"),
    ],
)
def test_a_shell_binding_is_checked_by_the_shell_executor_when_loaded(
    binding: dict[str, Any], message: str
) -> None:
    data = {"bindings": [SHELL, {"name": "bad", "executor": "shell", **binding}]}
    assert refused(data).startswith(f"<config>: {message}")


def test_whether_a_cwd_exists_is_left_to_the_launch() -> None:
    config = Config.parse({"bindings": [{**SHELL, "cwd": "/nonexistent/rota"}]})
    assert config.bindings["report"].config["cwd"] == "/nonexistent/rota"


def test_an_executor_registered_later_is_not_refused_at_load_but_by_check_executors() -> None:
    config = Config.parse({"bindings": [SHELL, {"name": "b", "executor": "mine", "mode": 1}]})
    assert config.bindings["b"].config == {"mode": 1}  # its executor checks it when registered
    config.check_executors({"shell", "mine"})
    with pytest.raises(ConfigError) as caught:
        config.check_executors({"shell"})
    assert caught.value.code == "unknown_executor"
    assert caught.value.message == (
        "<config>: bindings[1].executor: no executor 'mine' is registered in this process "
        "(registered: shell)"
    )


# -- field paths of what is refused (issue 28, item 8) ------------------------------------

RUNS = {"executor": "shell", "command": ["true"]}


def test_a_duplicate_binding_names_the_second_entry() -> None:
    message = refused({"bindings": [{"name": "a", **RUNS}, {"name": "b", **RUNS},
                                    {"name": "a", **RUNS}]})  # fmt: skip
    assert message.removeprefix("<config>: ").startswith(
        "bindings[2].name: duplicate binding name 'a'"
    )
    assert "(bindings[0] has it too)" in message


def test_a_duplicate_budget_names_the_second_entry() -> None:
    budget = {"unit": "usd", "max": 10, "per": "work", "period": "day"}
    message = refused({"budgets": [budget, dict(budget)]})
    assert message.removeprefix("<config>: ").startswith("budgets[1]: budgets[0] is "), message


def test_a_malformed_environment_names_the_bindings_path_in_the_file() -> None:
    message = refused({"bindings": [{"name": "ok", **RUNS},
                                    {"name": "b", **RUNS, "environment": {"K": 5}}]})  # fmt: skip
    assert message.removeprefix("<config>: ").startswith(
        "bindings[1].environment.K must be a string"
    ), message


@pytest.mark.parametrize(
    ("key", "meant"), [("timeout", "timeout_seconds"), ("retries", "retry"), ("zzz", None)]
)
def test_an_unknown_key_lists_a_bindings_own_keys_and_the_nearest(
    key: str, meant: str | None
) -> None:
    message = refused({"bindings": [{"name": "b", **RUNS, key: 5}]})
    assert message.removeprefix("<config>: ").startswith(
        f"bindings[0].{key}: unknown key; allowed: ['command'"
    ), message
    assert "or a binding's own: control_fallback, executor, handoff, name, retry," in message
    assert message.endswith(f"did you mean {meant!r}?") == (meant is not None), message
