"""rota's apsw store as an `eventsourcing` persistence module.

`PERSISTENCE_MODULE=rota.infrastructure.eventsourcing.sqlite` with `APSW_DBNAME=<file>` (or
the stock `SQLITE_DBNAME`) gives an eventsourcing `Application` rota's log: the same `events` table,
the same gapless positions, the same hash chain, `BEGIN IMMEDIATE` writes and a subscription
that wakes on commits of other processes. Stored events map onto the log's columns: the
originator id is the stream, the originator version the stream version, the topic the type
(with `type_version` 0, marking a row that is not a rota domain event) and the state the
payload. Snapshots (`aggregate_recorder("snapshots")`) live in their own table, outside the
chain. Tracking rows (one per upstream application, only ever moving forward) live in the
`tracking` table, written in the same transaction as the events they accompany.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
from uuid import UUID

import apsw
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    IntegrityError,
    Notification,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType

from rota.application.errors import StoreError, StoreIntegrityError, StoreUnavailable
from rota.infrastructure.eventsourcing.common import (
    CommitSubscription,
    EsDatastore,
    EsFactory,
    EsRecorder,
    OriginatorIdType,
    RotaNotification,
    position_range,
    version_range,
)
from rota.infrastructure.sqlite.store import SQLiteStore


class ApswDatastore(EsDatastore):
    """The shared rota store behind every recorder of one factory."""

    store: SQLiteStore

    def __init__(self, path: str, originator_id_type: OriginatorIdType = "uuid") -> None:
        try:
            self.store = SQLiteStore(path)
        except StoreError as exc:
            raise OperationalError(str(exc)) from exc
        self.originator_id_type = originator_id_type

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


class ApswRecorder(EsRecorder[ApswDatastore]):
    pass


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
        rows = datastore.rows(stored_events)

        def body(cursor: apsw.Cursor) -> list[int]:
            if tracking is not None:
                insert_tracking_row(cursor, tracking)
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
        sql = version_range(sql, params, "?", gt=gt, lte=lte, desc=desc, limit=limit)
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
        sql = "SELECT position, stream, version, type, type_version, data FROM events WHERE 1"
        params: list[Any] = []
        if topics:
            sql += f" AND type IN ({', '.join('?' for _ in topics)})"
            params.extend(topics)
        sql = position_range(
            sql, params, "?", start=start, stop=stop, inclusive=inclusive_of_start, limit=limit
        )
        originator = self.datastore.originator
        return [
            RotaNotification(
                id=p,
                originator_id=originator(s),
                originator_version=v,
                topic=t,
                state=d if isinstance(d, bytes) else d.encode(),
                type_version=tv,
            )
            for p, s, v, t, tv, d in self.datastore.query(sql, tuple(params))
        ]

    def max_notification_id(self) -> int | None:
        rows = self.datastore.query("SELECT max(position) FROM events", ())
        return None if rows[0][0] is None else int(rows[0][0])

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return ApswSubscription(self, gt=gt, topics=topics)


class ApswSubscription(CommitSubscription[ApswApplicationRecorder]):
    """Wakes the library's pull loop whenever any process commits to the log."""

    def _head(self, recorder: ApswApplicationRecorder) -> int:
        return recorder.datastore.store.head_position()


def insert_tracking_row(cursor: apsw.Cursor, tracking: Tracking) -> None:
    """Record `tracking` in the cursor's transaction; refuse a position not after the last."""
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
        self.datastore.write(lambda c: insert_tracking_row(c, tracking))

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


class ApswFactory(EsFactory[ApswTrackingRecorder]):
    """The infrastructure factory eventsourcing finds in this module."""

    APSW_DBNAME = "APSW_DBNAME"
    SQLITE_DBNAME = "SQLITE_DBNAME"

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
        self.datastore = ApswDatastore(path, self.originator_id_type())
