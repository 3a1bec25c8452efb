"""`--app MODULE:FUNCTION` (or the config's `[app] module`): your Python jobs under the CLI.

The contract, as `celery -A`, `procrastinate --app` and `uvicorn` have theirs: MODULE is a
dotted module name, imported with the current directory first on `sys.path` (then
PYTHONPATH and the installed packages); FUNCTION is a plain function in it (or a dotted
path to one) that takes the `rota.Scheduler` the command opened, registers callables on it
(`scheduler.register(name, fn)`, sync or `async def`), may `bind` more bindings and define
schedules, and returns nothing:

    # myjobs/tasks.py
    def register(scheduler: rota.Scheduler) -> None:
        scheduler.register("resize", resize)           # def resize(ctx): ...
        scheduler.register("notify", notify)           # async def notify(ctx): ...

`rota run --app myjobs.tasks:register` runs them with the daemon's signals, logs, HTTP API,
metrics and checkpoints; `rota submit` loads the same app (from `[app] module` or `--app`)
so that it knows the bindings the daemon serves, and runs nothing. The module is imported,
and the function found, before the store is opened; the function is called once the store
is open, before the loop starts. Every mistake is one line with a code, no traceback:
`app_invalid`, `app_not_found`, `app_not_callable`, `app_failed` (rota.infrastructure.config).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from rota.domain.errors import RotaError
from rota.infrastructure.config import APP_SPEC, Config, EntryCode

AppFunction = Callable[[Any], object]


class App:
    """A loaded app: its spec (`module:function`) and the function to call."""

    def __init__(self, spec: str, function: AppFunction) -> None:
        self.spec, self.function = spec, function

    def register_on(self, scheduler: Any) -> None:
        """Call the function with `scheduler`; what it raises is `app_failed` (a `RotaError`
        it raises, such as `invalid_config` from `register`, keeps its code)."""
        try:
            result = self.function(scheduler)
        except RotaError:
            raise
        except Exception as exc:
            raise _app_failed(f"{self.spec} raised", exc, "see the line it names") from None
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if callable(close):
                close()  # never awaited: no "coroutine was never awaited" warning
            raise RotaError(
                f"{self.spec} returned an awaitable: the app's function must be a plain "
                "'def register(scheduler)' (the callables it registers may be async)",
                code=EntryCode.APP_NOT_CALLABLE,
            )


def app_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        metavar="MODULE:FUNCTION",
        help="import MODULE (the current directory first on the path) and call "
        "FUNCTION(scheduler) to register your Python callables (default: the config's "
        "[app] module)",
    )


def load_app(args: argparse.Namespace, config: Config) -> App | None:
    """The app `--app` names, else the config's `[app] module`; None when neither does."""
    spec = getattr(args, "app", None) or config.app
    if spec is None:
        return None
    return App(spec, find_function(spec))


def find_function(spec: str) -> AppFunction:
    """Import the module of `spec` (`module:function`) and return its function."""
    if not APP_SPEC.fullmatch(spec):
        raise RotaError(
            f"--app {spec[:80]!a} is not 'package.module:function' (dotted Python names and "
            "one colon, e.g. myjobs.tasks:register)",
            code=EntryCode.APP_INVALID,
        )
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` and uvicorn's --app-dir do
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise RotaError(
                f"--app {spec}: no module named {exc.name!r} (looked in the current "
                "directory, PYTHONPATH and the installed packages)",
                code=EntryCode.APP_NOT_FOUND,
            ) from None
        raise _app_failed(f"importing {module_name} failed", exc, _hint(module_name)) from None
    except (Exception, SystemExit) as exc:
        raise _app_failed(f"importing {module_name} failed", exc, _hint(module_name)) from None
    found: object = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise RotaError(
                f"--app {spec}: {module_name} has no attribute {attribute!r}",
                code=EntryCode.APP_NOT_FOUND,
            ) from None
    if not callable(found) or inspect.iscoroutinefunction(found) or not _takes_one(found):
        raise RotaError(
            f"--app {spec}: {attribute} is a {type(found).__name__}, not a plain function "
            "taking the scheduler (def register(scheduler): ...)",
            code=EntryCode.APP_NOT_CALLABLE,
        )
    return found


def _takes_one(function: Callable[..., object]) -> bool:
    """Whether `function` can be called with one positional argument (when its signature
    cannot be read, as for some builtins, it is taken as it is)."""
    try:
        inspect.signature(function).bind(None)
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _hint(module_name: str) -> str:
    return f"run python -c 'import {module_name}' for the traceback"


def _app_failed(what: str, exc: BaseException, hint: str) -> RotaError:
    """`app_failed`: the exception's type and where it was raised, never its message (it
    may hold anything, environment values included) nor a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return RotaError(
        f"{what}: {type(exc).__name__}{where}; {hint}",
        code=EntryCode.APP_FAILED,
    )


__all__ = ["App", "app_option", "find_function", "load_app"]
