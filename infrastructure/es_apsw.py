"""rota's apsw store as an `eventsourcing` persistence module.

`PERSISTENCE_MODULE=rota.infrastructure.es_apsw` with `APSW_DBNAME=<file>` (or the stock
`SQLITE_DBNAME`) gives an eventsourcing `Application` rota's log: the same `events` table,
the same gapless positions, the same hash chain, `BEGIN IMMEDIATE` writes and a subscription
that wakes on commits of other processes. Stored events map onto the log's columns: the
originator id is the stream, the originator version the stream version, the topic the type
(with `type_version` 0, marking a row that is not a rota domain event) and the state the
payload. Snapshots (`aggregate_recorder("snapshots")`) live in their own table, outside the
chain. Tracking rows (one per upstream application, only ever moving forward) live in the
`tracking` table, written in the same transaction as the events they accompany.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal, cast
from uuid import UUID

import apsw
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType, resolve_topic, strtobool

from .errors import StoreError, StoreIntegrityError, StoreUnavailable
from .sqlite_store import Row, SQLiteStore

OriginatorIdType = Literal["uuid", "text"]
_NAME = "[A-Za-z_][A-Za-z0-9_]*"


class ApswDatastore:
    """The shared rota store behind every recorder of one factory."""

    def __init__(self, path: str, originator_id_type: OriginatorIdType = "uuid") -> None:
        try:
            self.store = SQLiteStore(path)
        except StoreError as exc:
            raise OperationalError(str(exc)) from exc
        self.originator_id_type = originator_id_type

    def stream(self, originator_id: UUID | str) -> str:
        return str(originator_id)

    def originator(self, stream: str) -> UUID | str:
        return UUID(stream) if self.originator_id_type == "uuid" else stream

    def write(self, body: Any) -> Any:
        try:
            return self.store.write(body)
        except StoreIntegrityError as exc:
            raise IntegrityError(str(exc)) from exc
        except StoreUnavailable as exc:
            raise OperationalError(str(exc)) from exc
        except apsw.Error as exc:
            raise PersistenceError(str(exc)) from exc

    def query(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            return self.store._query(sql, params)
        except StoreError as exc:
            raise OperationalError(str(exc)) from exc

    def close(self) -> None:
        self.store.close()


class ApswRecorder:
    def __init__(self, datastore: ApswDatastore) -> None:
        self.datastore = datastore

    def create_table(self) -> None:
        """The log's tables are created when the store opens."""


class ApswAggregateRecorder(ApswRecorder, AggregateRecorder):
    """Stored events in the chained log (`events`) or, for snapshots, a side table."""

    def __init__(self, datastore: ApswDatastore, purpose: str = "events") -> None:
        super().__init__(datastore)
        if not purpose.isidentifier():
            raise ValueError(f"recorder purpose {purpose!r} is not an identifier")
        self.side_table = None if purpose == "events" else f"es_{purpose}"

    def create_table(self) -> None:
        if self.side_table is None:
            return
        table = self.side_table
        self.datastore.write(
            lambda c: c.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (stream TEXT NOT NULL, "
                "version INTEGER NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL, "
                "PRIMARY KEY (stream, version)) WITHOUT ROWID"
            )
        )

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        self._insert(stored_events, kwargs.get("tracking"))
        return None

    def _insert(self, stored_events: Sequence[StoredEvent], tracking: Tracking | None) -> list[int]:
        datastore = self.datastore
        rows = [
            Row(datastore.stream(e.originator_id), e.originator_version, e.topic, 0, None, e.state)
            for e in stored_events
        ]

        def body(cursor: apsw.Cursor) -> list[int]:
            if tracking is not None:
                _insert_tracking(cursor, tracking)
            if self.side_table is not None:
                cursor.executemany(
                    f"INSERT INTO {self.side_table} (stream, version, type, data) "
                    "VALUES (?, ?, ?, ?)",
                    [(r.stream, r.version, r.type, r.data) for r in rows],
                )
                return []
            return [p for p, _, _ in datastore.store.insert_rows(cursor, rows)]

        if not rows and tracking is None:
            return []
        return cast(list[int], datastore.write(body))

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        table = self.side_table or "events"
        sql = f"SELECT stream, version, type, data FROM {table} WHERE stream = ?"
        params: list[Any] = [self.datastore.stream(originator_id)]
        if gt is not None:
            sql += " AND version > ?"
            params.append(gt)
        if lte is not None:
            sql += " AND version <= ?"
            params.append(lte)
        sql += " ORDER BY version DESC" if desc else " ORDER BY version"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            StoredEvent(
                self.datastore.originator(s), v, t, d if isinstance(d, bytes) else d.encode()
            )
            for s, v, t, d in self.datastore.query(sql, tuple(params))
        ]


class ApswApplicationRecorder(ApswAggregateRecorder, ApplicationRecorder):
    """The log as an eventsourcing application sequence: notification id = position."""

    def __init__(self, datastore: ApswDatastore) -> None:
        super().__init__(datastore, "events")

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        return self._insert(stored_events, kwargs.get("tracking"))

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        sql = "SELECT position, stream, version, type, data FROM events WHERE 1"
        params: list[Any] = []
        if start is not None:
            sql += " AND position >= ?" if inclusive_of_start else " AND position > ?"
            params.append(start)
        if stop is not None:
            sql += " AND position <= ?"
            params.append(stop)
        if topics:
            sql += f" AND type IN ({', '.join('?' for _ in topics)})"
            params.extend(topics)
        sql += " ORDER BY position LIMIT ?"
        params.append(limit)
        originator = self.datastore.originator
        return [
            Notification(
                id=p,
                originator_id=originator(s),
                originator_version=v,
                topic=t,
                state=d if isinstance(d, bytes) else d.encode(),
            )
            for p, s, v, t, d in self.datastore.query(sql, tuple(params))
        ]

    def max_notification_id(self) -> int | None:
        rows = self.datastore.query("SELECT max(position) FROM events", ())
        return None if rows[0][0] is None else int(rows[0][0])

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return ApswSubscription(self, gt=gt, topics=topics)


class ApswSubscription(ListenNotifySubscription[ApswApplicationRecorder]):
    """Wakes the library's pull loop whenever any process commits to the log."""

    def __init__(
        self, recorder: ApswApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        self._watch_stop = threading.Event()
        # Read the head before the first pull starts, so a commit in between still wakes it.
        self._seen = recorder.datastore.store.head_position()
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        store = self._recorder.datastore.store
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


def _insert_tracking(cursor: apsw.Cursor, tracking: Tracking) -> None:
    row = cursor.execute(
        "SELECT notification_id FROM tracking WHERE application_name = ?",
        (tracking.application_name,),
    ).fetchone()
    if row is not None and row[0] >= tracking.notification_id:
        raise IntegrityError(
            f"tracking for {tracking.application_name!r} is already at {row[0]}, "
            f"not before {tracking.notification_id}"
        )
    cursor.execute(
        "INSERT INTO tracking (application_name, notification_id) VALUES (?, ?) "
        "ON CONFLICT (application_name) DO UPDATE SET notification_id = excluded.notification_id",
        (tracking.application_name, tracking.notification_id),
    )


class ApswTrackingRecorder(ApswRecorder, TrackingRecorder):
    """Tracking positions, one row per upstream application, only ever moving forward."""

    def insert_tracking(self, tracking: Tracking) -> None:
        self.datastore.write(lambda c: _insert_tracking(c, tracking))

    def max_tracking_id(self, application_name: str) -> int | None:
        rows = self.datastore.query(
            "SELECT notification_id FROM tracking WHERE application_name = ?",
            (application_name,),
        )
        return int(rows[0][0]) if rows else None


class ApswProcessRecorder(ApswTrackingRecorder, ApswApplicationRecorder, ProcessRecorder):
    """Events and the tracking position they answer, in one transaction."""

    def __init__(self, datastore: ApswDatastore) -> None:
        ApswApplicationRecorder.__init__(self, datastore)


class ApswFactory(InfrastructureFactory[ApswTrackingRecorder]):
    """The infrastructure factory eventsourcing finds in this module."""

    APSW_DBNAME = "APSW_DBNAME"
    SQLITE_DBNAME = "SQLITE_DBNAME"
    ORIGINATOR_ID_TYPE = "ORIGINATOR_ID_TYPE"
    CREATE_TABLE = "CREATE_TABLE"

    aggregate_recorder_class = ApswAggregateRecorder
    application_recorder_class = ApswApplicationRecorder
    tracking_recorder_class = ApswTrackingRecorder
    process_recorder_class = ApswProcessRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        path = self.env.get(self.APSW_DBNAME) or self.env.get(self.SQLITE_DBNAME)
        if not path:
            keys = ", ".join(self.env.create_keys(self.APSW_DBNAME))
            raise OSError(f"rota's apsw store needs a database file: set one of {keys}")
        if path.startswith("file:"):
            path = path[len("file:") :]
        id_type = (self.env.get(self.ORIGINATOR_ID_TYPE, "uuid") or "uuid").lower()
        if id_type not in ("uuid", "text"):
            raise OSError(f"Invalid {self.ORIGINATOR_ID_TYPE} {id_type!r}: use 'uuid' or 'text'")
        self.datastore = ApswDatastore(path, cast(OriginatorIdType, id_type))

    def _create(self, recorder: ApswRecorder) -> None:
        if strtobool(self.env.get(self.CREATE_TABLE, "yes") or "yes"):
            recorder.create_table()

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        recorder = self.aggregate_recorder_class(self.datastore, purpose)
        self._create(recorder)
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        topic = self.env.get(self.APPLICATION_RECORDER_TOPIC)
        cls = resolve_topic(topic) if topic else self.application_recorder_class
        recorder = cls(self.datastore)
        self._create(recorder)
        return cast(ApplicationRecorder, recorder)

    def tracking_recorder(
        self, tracking_recorder_class: type[ApswTrackingRecorder] | None = None
    ) -> ApswTrackingRecorder:
        if tracking_recorder_class is None:
            topic = self.env.get(self.TRACKING_RECORDER_TOPIC)
            tracking_recorder_class = (
                resolve_topic(topic) if topic else self.tracking_recorder_class
            )
        assert tracking_recorder_class is not None
        recorder = tracking_recorder_class(self.datastore)
        self._create(recorder)
        return recorder

    def process_recorder(self) -> ProcessRecorder:
        topic = self.env.get(self.PROCESS_RECORDER_TOPIC)
        cls = resolve_topic(topic) if topic else self.process_recorder_class
        recorder = cls(self.datastore)
        self._create(recorder)
        return cast(ProcessRecorder, recorder)

    def close(self) -> None:
        self.datastore.close()
