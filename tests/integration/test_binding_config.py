"""A binding's config is checked by its executor before any Work is accepted for it, and a
launch that still fails for a configuration reason is a permanent failure."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

import rota
from rota.infrastructure.clock import ManualClock


class Picky(rota.Executor):
    """Completes at once; its bindings need `mode` = "fast" or "slow" and nothing else."""

    name = "picky"

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.launched = threading.Event()

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> None:
        extra = sorted(set(config) - {"mode"})
        if extra:
            raise rota.InvalidExecutorConfig(extra[0], "unknown key; allowed: ['mode']")
        if config.get("mode") not in ("fast", "slow"):
            raise rota.InvalidExecutorConfig("mode", 'must be "fast" or "slow"')

    def launch(self, ctx: rota.LaunchContext, done: Any) -> None:
        self.launched.set()
        if self.failure is not None:
            raise self.failure
        done(rota.Result())


def refusal(call: Any) -> rota.RotaError:
    with pytest.raises(rota.RotaError) as caught:
        call()
    return caught.value


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 2, 10, tzinfo=UTC))


def types(s: rota.Scheduler) -> list[str]:
    return [e.type for e in s.events(limit=10_000)]


# -- bind() and register() -----------------------------------------------------------------


def test_bind_checks_the_config_with_the_bindings_executor() -> None:
    with rota.open("memory://", config={}) as s:
        error = refusal(lambda: s.bind("nightly", executor="shell", config={"command": "x.sh"}))
        assert error.code == "invalid_config"
        assert error.message.startswith("bindings.nightly.command: must be a list of strings")
        error = refusal(
            lambda: s.bind("nightly", executor="shell", config={"command": ["x"], "cdw": "/"})
        )
        assert error.message.startswith("bindings.nightly.cdw: unknown key")
        assert "nightly" not in s.service.bindings
        s.bind("nightly", executor="shell", config={"command": ["true"]})
        assert s.service.bindings["nightly"].config == {"command": ["true"]}


def test_bind_refuses_an_executor_that_is_not_registered() -> None:
    with rota.open("memory://", config={}) as s:
        error = refusal(lambda: s.bind("later", executor="nobody"))
        assert error.code == "unknown_executor"
        assert error.message == (
            "bindings.later.executor: no executor 'nobody' is registered in this process "
            "(registered: shell)"
        )


def test_register_checks_the_bindings_already_defined_on_the_executor() -> None:
    config = {"bindings": [{"name": "p", "executor": "picky", "mode": "warp"}]}
    with rota.open("memory://", config=config) as s:
        error = refusal(lambda: s.register("picky", executor=Picky(), binding=False))
        assert error.code == "invalid_config"
        assert error.message == '<config>: bindings[0].mode: must be "fast" or "slow"'
        assert "picky" not in s.executors and "picky" not in s.service.registrations
        error = refusal(lambda: s.register("picky", executor=Picky(), config={"mode": "x"}))
        assert error.message.startswith("<config>: bindings[0].mode")  # the file's one first


def test_register_with_a_binding_checks_its_config() -> None:
    with rota.open("memory://", config={}) as s:
        error = refusal(lambda: s.register("picky", executor=Picky(), config={"speed": 1}))
        assert error.message.startswith("bindings.picky.speed: unknown key; allowed: ['mode']")
        assert "or a binding's own: control_fallback, executor," in error.message
        assert "picky" not in s.service.bindings


# -- submit ----------------------------------------------------------------------------------


def test_submit_refuses_a_binding_whose_executor_is_not_registered_yet() -> None:
    config = {"bindings": [{"name": "p", "executor": "picky", "mode": "fast"}]}
    with rota.open("memory://", config=config) as s:
        error = refusal(lambda: s.submit("w", binding="p"))
        assert error.code == "unknown_executor"
        assert error.message.startswith("<config>: bindings[0].executor: no executor 'picky'")
        assert s.events() == [] and s.work("w") is None  # nothing accepted
        # A binding known nowhere (not defined here, never served) is refused at once.
        assert refusal(lambda: s.submit("ghost", binding="undefined")).code == "unknown_binding"
        assert s.work("ghost") is None


def test_the_embedded_flow_open_register_submit_still_runs() -> None:
    config = {"bindings": [{"name": "p", "executor": "picky", "mode": "fast"}]}
    with rota.open("memory://", config=config) as s:
        s.register("picky", executor=Picky(), binding=False)
        s.check_bindings()
        s.submit("w", binding="p")
        s.run_until_idle(timeout=30)
        assert s.work("w").state == "completed"


def test_check_bindings_names_the_first_binding_nothing_here_runs() -> None:
    config = {
        "bindings": [
            {"name": "ok", "executor": "shell", "command": ["true"]},
            {"name": "p", "executor": "picky", "mode": "fast"},
        ]
    }
    with rota.open("memory://", config=config) as s:
        error = refusal(s.check_bindings)
        assert error.code == "unknown_executor" and "bindings[1].executor" in error.message


# -- a launch refused for its config -----------------------------------------------------------


def test_a_launch_refused_for_its_config_is_a_permanent_failure(
    tmp_path: Path, clock: ManualClock
) -> None:
    workdir = tmp_path / "gone"
    workdir.mkdir()
    binding = {"name": "report", "executor": "shell", "command": ["true"], "cwd": str(workdir)}
    with rota.open("memory://", config={"bindings": [binding]}, clock=clock) as s:
        workdir.rmdir()  # the directory went after the config was loaded
        s.submit("w", binding="report")
        s.run_until_idle(timeout=30)
        view = s.work("w")
        assert view is not None and view.state == "failed"
        (attempt,) = view.attempts
        assert attempt.error.code == "invalid_config"
        assert "config.cwd" in attempt.error.message
        assert str(workdir) not in attempt.error.message  # the executor's text is not kept
        assert view.retry.blocked_reason == "permanent_failure"
        assert "core.retry.armed" not in types(s)


def test_an_unmarked_launch_error_is_still_retried(clock: ManualClock) -> None:
    """The negative control: an `ExecutorError` that is not a config error arms a retry."""
    with rota.open("memory://", config={}, clock=clock) as s:
        s.register("picky", executor=Picky(rota.ExecutorError("no slot")), config={"mode": "fast"})
        s.submit("w", binding="picky")
        s.run_until_idle(timeout=30)
        view = s.work("w")
        assert view is not None and view.state == "retry_wait"
        assert view.attempts[0].error.code == "executor_error"
        assert "core.retry.armed" in types(s)


def test_a_custom_executor_refusing_its_config_at_launch_fails_permanently(
    clock: ManualClock,
) -> None:
    failure = rota.InvalidExecutorConfig("mode", "the fast lane is closed on this host")
    with rota.open("memory://", config={}, clock=clock) as s:
        s.register("picky", executor=Picky(failure), config={"mode": "fast"})
        s.submit("w", binding="picky")
        s.run_until_idle(timeout=30)
        view = s.work("w")
        assert view is not None and view.state == "failed"
        error = view.attempts[0].error
        assert msgspec.to_builtins(error) == {
            "code": "invalid_config",
            "message": "executor 'picky' refused the binding's config.mode: fix the binding, "
            "then retry the Work",
        }
        assert "core.retry.armed" not in types(s)


def test_record_served_racing_another_owner_records_each_name_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two schedulers starting together both see "a" unrecorded; the other records it
    # first, with its own owner. The loser's append conflicts on "a"'s identity: it
    # records what is still missing ("b") instead of failing its start.
    store = f"sqlite:///{tmp_path / 'race.db'}"
    with rota.open(store, owner="first") as first, rota.open(store, owner="second") as second:
        lifecycle = second.service.lifecycle
        real = lifecycle.served
        stale = {"a"}

        def served_seen_before_the_other(binding: str) -> bool:
            if binding in stale:
                stale.discard(binding)
                first.service.lifecycle.record_served(["a"])
                return False
            return real(binding)

        monkeypatch.setattr(lifecycle, "served", served_seen_before_the_other)
        assert lifecycle.record_served(["a", "b"]) == 1
        served = [e for e in second.events() if e.type == "core.binding.served"]
        assert sorted((e.data["binding"], e.data["owner"]) for e in served) == [
            ("a", "first"),
            ("b", "second"),
        ]
