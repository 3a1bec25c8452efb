"""What rota's two `eventsourcing` persistence modules (`es_apsw`, `es_postgres`) share.

Each module keeps its own SQL, transactions and driver-error translation; this module holds
the store-independent parts: the mapping between originator ids and the log's streams, the
recorder base, the version-range query of `select_events`, the subscription that wakes the
library's pull loop on commits of other processes, and the factory that builds recorders.
The generic bases here carry type parameters, so `InfrastructureFactory.construct` never
mistakes one for the factory of the module importing it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, cast
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    ListenNotifySubscription,
    Notification,
    ProcessRecorder,
    StoredEvent,
    TrackingRecorder,
)
from eventsourcing.utils import resolve_topic, strtobool

from rota.infrastructure.log_rows import Row

OriginatorIdType = Literal["uuid", "text"]


class _Store(Protocol):
    def head_position(self) -> int: ...

    def wait_for_commit(self, seen: int, timeout: float) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RotaNotification(Notification):
    """A notification of the rota log, with the schema version its payload was written in
    (`type_version`; 0 for a row an eventsourcing application wrote), so that a follower
    decodes rota's events exactly as rota replays them (see `...eventsourcing.follow`)."""

    type_version: int = 0


class EsDatastore:
    """The shared rota store behind every recorder of one factory (`store` set by the module)."""

    store: Any
    originator_id_type: OriginatorIdType

    def stream(self, originator_id: UUID | str) -> str:
        return str(originator_id)

    def originator(self, stream: str) -> UUID | str:
        return UUID(stream) if self.originator_id_type == "uuid" else stream

    def rows(self, stored_events: Sequence[StoredEvent]) -> list[Row]:
        """Stored events as log rows: `type_version` 0 marks a row that is no rota event."""
        return [
            Row(self.stream(e.originator_id), e.originator_version, e.topic, 0, None, e.state)
            for e in stored_events
        ]

    def close(self) -> None:
        self.store.close()


D = TypeVar("D", bound=EsDatastore)


class EsRecorder(Generic[D]):
    def __init__(self, datastore: D) -> None:
        self.datastore = datastore

    def create_table(self) -> None:
        """The log's tables are created when the store opens."""


def version_range(
    sql: str,
    params: list[Any],
    mark: str,
    *,
    gt: int | None,
    lte: int | None,
    desc: bool,
    limit: int | None,
) -> str:
    """`sql` narrowed to versions in (`gt`, `lte`], ordered and limited; appends to `params`.

    `mark` is the driver's placeholder (`?` or `%s`).
    """
    if gt is not None:
        sql += f" AND version > {mark}"
        params.append(gt)
    if lte is not None:
        sql += f" AND version <= {mark}"
        params.append(lte)
    sql += " ORDER BY version DESC" if desc else " ORDER BY version"
    if limit is not None:
        sql += f" LIMIT {mark}"
        params.append(limit)
    return sql


def position_range(
    sql: str,
    params: list[Any],
    mark: str,
    *,
    start: int | None,
    stop: int | None,
    inclusive: bool,
    limit: int,
) -> str:
    """`sql` narrowed to log positions from `start` (`inclusive` or not) to `stop`, in
    position order and limited; appends to `params`. `mark` is the driver's placeholder."""
    if start is not None:
        sql += f" AND position >= {mark}" if inclusive else f" AND position > {mark}"
        params.append(start)
    if stop is not None:
        sql += f" AND position <= {mark}"
        params.append(stop)
    sql += f" ORDER BY position LIMIT {mark}"
    params.append(limit)
    return sql


A = TypeVar("A", bound=ApplicationRecorder)


class CommitSubscription(ListenNotifySubscription[A]):
    """Wakes the library's pull loop whenever any process commits to the log.

    A watcher thread waits on the store's commit signal; `_head()` is the log's head read
    before the first pull starts, so a commit landing between that pull and the watcher's
    start still counts as news (reading it in the watcher could miss it).
    """

    def __init__(self, recorder: A, gt: int | None = None, topics: Sequence[str] = ()) -> None:
        self._watch_stop = threading.Event()
        self._seen = self._head(recorder)
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _head(self, recorder: A) -> int:
        raise NotImplementedError

    def _watch(self) -> None:
        store: _Store = cast(Any, self._recorder).datastore.store
        seen = self._seen
        while not self._watch_stop.is_set() and not self._has_been_stopped:
            if store.wait_for_commit(seen, 0.1):
                seen = store.head_position()
                self._has_been_notified.set()

    def stop(self) -> None:
        self._watch_stop.set()
        super().stop()

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._watcher.join()


TR = TypeVar("TR", bound=TrackingRecorder)


class EsFactory(InfrastructureFactory[TR]):
    """Builds a module's recorders over one shared datastore (`datastore`, set by the module).

    `ORIGINATOR_ID_TYPE` (`uuid` or `text`) says how streams map back to originator ids;
    `CREATE_TABLE` (default yes) whether recorders create their side tables.
    """

    ORIGINATOR_ID_TYPE = "ORIGINATOR_ID_TYPE"
    CREATE_TABLE = "CREATE_TABLE"

    aggregate_recorder_class: type[Any]
    application_recorder_class: type[Any]
    tracking_recorder_class: type[TR]
    process_recorder_class: type[Any]
    datastore: EsDatastore

    def originator_id_type(self) -> OriginatorIdType:
        id_type = (self.env.get(self.ORIGINATOR_ID_TYPE, "uuid") or "uuid").lower()
        if id_type not in ("uuid", "text"):
            raise OSError(f"Invalid {self.ORIGINATOR_ID_TYPE} {id_type!r}: use 'uuid' or 'text'")
        return cast(OriginatorIdType, id_type)

    def _create(self, recorder: EsRecorder[Any]) -> None:
        if strtobool(self.env.get(self.CREATE_TABLE, "yes") or "yes"):
            recorder.create_table()

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        recorder = self.aggregate_recorder_class(self.datastore, purpose)
        self._create(recorder)
        return cast(AggregateRecorder, recorder)

    def application_recorder(self) -> ApplicationRecorder:
        topic = self.env.get(self.APPLICATION_RECORDER_TOPIC)
        cls = resolve_topic(topic) if topic else self.application_recorder_class
        recorder = cls(self.datastore)
        self._create(recorder)
        return cast(ApplicationRecorder, recorder)

    def tracking_recorder(self, tracking_recorder_class: type[TR] | None = None) -> TR:
        if tracking_recorder_class is None:
            topic = self.env.get(self.TRACKING_RECORDER_TOPIC)
            tracking_recorder_class = (
                resolve_topic(topic) if topic else self.tracking_recorder_class
            )
        assert tracking_recorder_class is not None
        recorder = cast(Any, tracking_recorder_class)(self.datastore)
        self._create(recorder)
        return cast(TR, recorder)

    def process_recorder(self) -> ProcessRecorder:
        topic = self.env.get(self.PROCESS_RECORDER_TOPIC)
        cls = resolve_topic(topic) if topic else self.process_recorder_class
        recorder = cls(self.datastore)
        self._create(recorder)
        return cast(ProcessRecorder, recorder)

    def close(self) -> None:
        self.datastore.close()
