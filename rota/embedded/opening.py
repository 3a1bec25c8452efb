"""`rota.open`: a `Scheduler` on the store a path, a URL or the configuration names."""

from __future__ import annotations

import os
from typing import Any

from rota import bootstrap
from rota.application.ports import Clock, Environment, ProjectionStore
from rota.infrastructure.config import Config
from rota.scheduler import Scheduler


def open(
    path_or_url: str | os.PathLike[str] | None = None,
    *,
    config: Config | str | os.PathLike[str] | dict[str, Any] | None = None,
    clock: Clock | None = None,
    owner: str | None = None,
    environment: Environment | None = None,
    projections: str | os.PathLike[str] | bool = True,
    read_only: bool = False,
) -> Scheduler:
    """Open a scheduler on a store (a path, `sqlite:///...`, `postgresql://...`, or
    `memory://` for tests; default: the config's store).

    `projections`: where the projections that let a scheduler open without replaying the
    log are kept: by default the file `<log>.projections` beside an SQLite log, the
    PostgreSQL log's own schema, an in-memory log's own tables; a store URL or file path,
    or False to fold from 0 at every open.

    `read_only` (`rota serve`): opening appends nothing; the configuration's `[[budgets]]`
    are not recorded (`core.budget.configured`), the log's own ones are in force.
    """
    if isinstance(config, dict):
        loaded = Config.parse(config)
    elif isinstance(config, Config):
        loaded = config
    elif config is None:
        loaded = Config.load()
    else:
        loaded = Config.load(config, required=True)
    url = os.fspath(path_or_url) if path_or_url is not None else loaded.store_url
    store = bootstrap.open_log(url, loaded, clock=clock)
    stored: ProjectionStore | None = None
    try:
        stored = bootstrap.open_projections(store, projections)
        return Scheduler(
            store,
            config=loaded,
            owner=owner,
            environment=environment,
            projections=stored,
            read_only=read_only,
        )
    except BaseException:
        if stored is not None:
            stored.close()
        store.close()
        raise


__all__ = ["open"]
