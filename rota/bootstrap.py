"""The composition root: the one place where rota's adapters are chosen and wired together.

Everything that runs rota (`rota.open`, the `rota` command, the benchmarks) builds its
store, projection store, service, executors and host here, from a configuration; nothing
else constructs a `SchedulerService` or a `Host`. The layers below never import this
module: replay and the views receive what they need (a store, a projection store, a
`Configuration`) from their caller.

    config --> open_log(url)             the event store the URL names (its backend:
                                         SQLite, PostgreSQL, memory; store_url.backend)
           --> open_projections(log)     the projections beside it (a file, the log's schema;
                                         projection_store(log, ...) for replay's commands)
           --> build_service(log, ...)   SchedulerService: transactions + command groups,
                                         observed by the decision log, sealing personal
                                         input under the store's key table (personal_keys)
           --> builtin_executors()       shell (and what the caller registers)
           --> build_host(service, ...)  the cadence over the service and the executors
                                         (and the attempt spans, with rota[otel])
"""

from __future__ import annotations

import logging
import os

from rota.application.errors import ProjectionStoreError
from rota.application.executor_directory import registration_of
from rota.application.host import Host
from rota.application.ports import (
    Clock,
    Environment,
    EventStore,
    Executor,
    ProjectionStore,
)
from rota.application.service import SchedulerService
from rota.domain.errors import RotaError
from rota.domain.policy import Binding, Registration, Settings
from rota.infrastructure.config import Config
from rota.infrastructure.decision_lines import DecisionLog
from rota.infrastructure.executors import builtin_executor_types, builtin_registrations
from rota.infrastructure.personal_cipher import AesGcmCipher
from rota.infrastructure.personal_keys import personal_keys_for
from rota.infrastructure.projection_stores import open_projection_store
from rota.infrastructure.store_url import backend
from rota.infrastructure.stores import redact_url
from rota.infrastructure.tracing import attempt_tracer
from rota.replay.errors import ReplayCode

logger = logging.getLogger("rota")


def builtin_executors() -> dict[str, Executor]:
    """The executors every scheduler has (`shell`), started."""
    return {name: kind() for name, kind in builtin_executor_types().items()}


def registrations_of(executors: dict[str, Executor]) -> dict[str, Registration]:
    """Each executor as registered: its name, pool and capabilities."""
    return {name: registration_of(name, executor) for name, executor in executors.items()}


def open_log(
    url: str | os.PathLike[str],
    config: Config | None = None,
    *,
    clock: Clock | None = None,
    create: bool = True,
    importing: bool = False,
) -> EventStore:
    """The event store `url` names, with the configuration's store settings.

    `create`: create the store if it does not exist (the commands that write: submit, run,
    import, and `rota.open`); without it a missing store is `store_not_found`. A store an
    interrupted import left unfinished is refused (`import_incomplete`) unless `importing`
    (the import that finishes it)."""
    given = {
        "synchronous": config.synchronous if config is not None else None,
        "reply_timeout": config.reply_timeout if config is not None else None,
    }
    found = backend(os.fspath(url))
    settings = {k: v for k, v in given.items() if v is not None and k in found.settings}
    store = found.open_log(clock=clock, create=create, **settings)
    if not importing:
        try:
            refuse_unfinished_import(store)
        except BaseException:
            store.close()
            raise
    return store


def refuse_unfinished_import(store: EventStore) -> None:
    """`import_incomplete` for a store holding only part of an export (`mark_import`)."""
    marker = store.unfinished_import()
    if marker is None:
        return
    position, _, head_hash = marker.partition(" ")
    raise RotaError(
        f"the store {redact_url(store.url)} holds an unfinished import: "
        f"{store.head().position} of the {position} events of an export whose head hash is "
        f"{head_hash[:16]}...; run the same 'rota import EXPORT --to URL' again to finish it "
        "(it resumes where it stopped), or remove this store and import into a new one",
        code=ReplayCode.IMPORT_INCOMPLETE,
    )


def open_projections(
    log: EventStore, projections: str | os.PathLike[str] | bool = True
) -> ProjectionStore | None:
    """The projection store a scheduler keeps beside `log`, or None.

    True: the default place (`<log>.projections` beside an SQLite log, the PostgreSQL
    log's own schema); a path; False: none (fold from position 0 at every open). A
    projection store that cannot be opened is derived data: logged, and run without.
    """
    if projections is False:
        return None
    named = None if projections is True else projections
    try:
        return open_projection_store(log, named)
    except ProjectionStoreError as exc:
        logger.warning("%s; folding the log from position 0 instead", exc)
        return None


def projection_store(
    log: EventStore, projections: str | os.PathLike[str] | None = None, *, must_exist: bool
) -> ProjectionStore | None:
    """The projection store a command reads or rebuilds (`projections` overrides the
    default place); errors are raised, not logged (`must_exist`: refuse to create one)."""
    return open_projection_store(log, projections, must_exist=must_exist)


def build_service(
    store: EventStore,
    *,
    settings: Settings | None = None,
    owner: str,
    bindings: dict[str, Binding] | None = None,
    registrations: dict[str, Registration] | None = None,
    projections: ProjectionStore | None = None,
    save_every: int = 5000,
) -> SchedulerService:
    """The application service over `store` (the one place one is constructed), logging
    each decision it appends (`rota.decisions`, rota.infrastructure.decision_lines)."""
    service = SchedulerService(
        store,
        settings=settings or Settings(),
        owner=owner,
        bindings=bindings,
        registrations=registrations,
        projections=projections,
        save_every=save_every,
        personal_keys=personal_keys_for(store),
        cipher=AesGcmCipher,
    )
    service.observe(DecisionLog())
    return service


def build_host(
    service: SchedulerService,
    executors: dict[str, Executor],
    *,
    environment: Environment | None = None,
) -> Host:
    """The cadence that drives `service` with `executors`, measuring elapsed time with
    the store's injected clock's monotonic reading (the system's when it has none); with
    OpenTelemetry installed (rota[otel]) each attempt is a span, and its launch gets the
    span's trace context."""
    clock = service.store.clock
    tracer = attempt_tracer()
    if tracer is not None:
        service.observe(tracer)
    trace_context = tracer.headers if tracer is not None else None
    return Host(
        service,
        executors,
        environment=environment,
        clock=clock,
        trace_context=trace_context,
    )


def read_only_service(
    store: EventStore, config: Config, owner: str = "explain"
) -> SchedulerService:
    """A service with the configuration's settings and bindings and the built-in executors'
    registrations (as `rota run` has them), for commands that only look (replay, explain)."""
    service = build_service(
        store,
        settings=config.settings,
        owner=owner,
        bindings=dict(config.bindings),
        registrations=builtin_registrations(),
    )
    for grant, environment in config.grants.values():
        service.set_grant(grant, environment)
    return service


__all__ = [
    "build_host",
    "build_service",
    "builtin_executors",
    "open_log",
    "open_projections",
    "projection_store",
    "read_only_service",
    "registrations_of",
]
