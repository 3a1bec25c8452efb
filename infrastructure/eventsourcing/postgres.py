"""rota's PostgreSQL store as an `eventsourcing` persistence module.

`PERSISTENCE_MODULE=rota.infrastructure.eventsourcing.postgres` with `POSTGRES_URL=postgresql://...`
(or the stock `POSTGRES_DBNAME`, `POSTGRES_HOST`, `POSTGRES_PORT`, `POSTGRES_USER`,
`POSTGRES_PASSWORD`) and `ROTA_POSTGRES_SCHEMA` (default: the URL's `?schema=`, else `rota`)
gives an eventsourcing `Application` rota's log: the same `events` table, the same gapless
positions taken under the head-row lock, the same hash chain, and a subscription woken by
LISTEN/NOTIFY with a polling safety net. `POSTGRES_LOCK_TIMEOUT` (seconds, default 5) and
`POSTGRES_POOL_SIZE` (default 8) tune the store.

Stored events map onto the log's columns: the originator id is the stream, the originator
version the stream version, the topic the type (with `type_version` 0, marking a row that is
not a rota domain event) and the state the bytes in `data_bytes`. Snapshots
(`aggregate_recorder("snapshots")`) live in their own table (`es_snapshots`), outside the
chain. Tracking rows (one per upstream application, only ever moving forward) live in the
`tracking` table, written in the same transaction as the events they accompany.

Unlike the stock recorder, a retry after a lost commit acknowledgement does not turn the
caller's own write into `IntegrityError`: when the retried events are found recorded exactly
as given, their notification ids are returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

import psycopg
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

from rota.application.errors import (
    StoreClosed,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
)
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
from rota.infrastructure.log_rows import Row
from rota.infrastructure.postgres.names import identifier, split_schema
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.postgres.transactions import Tx

T = TypeVar("T")


class PgDatastore(EsDatastore):
    """The shared rota store behind every recorder of one factory."""

    store: PostgresStore

    def __init__(
        self, url: str, schema: str, originator_id_type: OriginatorIdType = "uuid", **settings: Any
    ) -> None:
        try:
            self.store = PostgresStore(url, schema=schema, **settings)
        except StoreError as exc:
            raise OperationalError(str(exc)) from exc
        self.schema = self.store.schema
        self.originator_id_type = originator_id_type

    def table(self, name: str) -> str:
        return f'"{self.schema}".{identifier(name, "table")}'

    def write(self, body: Callable[[Tx], T], *, lock: bool = False) -> T:
        try:
            return self.store.write(body, lock=lock)
        except StoreIntegrityError as exc:
            raise IntegrityError(str(exc)) from exc
        except (StoreUnavailable, StoreClosed) as exc:
            raise OperationalError(str(exc)) from exc
        except StoreError as exc:
            raise PersistenceError(str(exc)) from exc

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self.store._query(sql, params)
        except StoreError as exc:
            raise OperationalError(str(exc)) from exc


def _state(text: str | None, blob: bytes | None) -> bytes:
    return bytes(blob) if blob is not None else (text or "").encode()


class PgRecorder(EsRecorder[PgDatastore]):
    pass


class PgAggregateRecorder(PgRecorder, AggregateRecorder):
    """Stored events in the chained log (`events`) or, for snapshots, a side table."""

    def __init__(self, datastore: PgDatastore, purpose: str = "events") -> None:
        super().__init__(datastore)
        name = None if purpose == "events" else identifier(f"es_{purpose}", "table")
        self.side_table = None if name is None else datastore.table(name)

    def create_table(self) -> None:
        if self.side_table is None:
            return
        table, lock = self.side_table, f"rota {self.datastore.schema} {self.side_table}"

        def create(tx: Tx) -> None:
            tx.cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            tx.cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (stream TEXT NOT NULL, "
                "version BIGINT NOT NULL, type TEXT NOT NULL, data BYTEA NOT NULL, "
                "PRIMARY KEY (stream, version))"
            )

        self.datastore.write(create)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        self._insert(stored_events, kwargs.get("tracking"))
        return None

    def _insert(self, stored_events: Sequence[StoredEvent], tracking: Tracking | None) -> list[int]:
        datastore = self.datastore
        rows = datastore.rows(stored_events)
        if not rows and tracking is None:
            return []

        def body(tx: Tx) -> list[int]:
            if tx.retrying and rows:  # an earlier attempt may have committed: its ack was lost
                done = self._recorded_already(tx, rows, tracking)
                if done is not None:
                    return done
            if tracking is not None:
                _insert_tracking(tx, datastore.table("tracking"), tracking)
            if self.side_table is not None:
                tx.cursor.executemany(
                    f"INSERT INTO {self.side_table} (stream, version, type, data) "
                    "VALUES (%s, %s, %s, %s)",
                    [(r.stream, r.version, r.type, r.data) for r in rows],
                )
                return []
            return [p for p, _, _ in datastore.store.insert_rows(tx, rows)]

        return datastore.write(body, lock=bool(rows) and self.side_table is None)

    def _recorded_already(
        self, tx: Tx, rows: list[Row], tracking: Tracking | None
    ) -> list[int] | None:
        """The positions of `rows` if all are recorded exactly as given (with `tracking`)."""
        table = self.side_table or self.datastore.table("events")
        position = "0" if self.side_table else "e.position"
        data = "e.data" if self.side_table else "e.data_bytes"
        found = tx.cursor.execute(
            f"SELECT {position}, e.type, {data} FROM unnest(%s::text[], %s::bigint[]) "
            f"WITH ORDINALITY AS u(s, v, i) LEFT JOIN {table} e "
            "ON e.stream = u.s AND e.version = u.v ORDER BY u.i",
            ([r.stream for r in rows], [r.version for r in rows]),
        ).fetchall()
        for (_, type_, data), row in zip(found, rows, strict=True):
            if type_ != row.type or data is None or bytes(data) != row.data:
                return None
        if tracking is not None:
            recorded = tx.cursor.execute(
                f"SELECT notification_id FROM {self.datastore.table('tracking')} "
                "WHERE application_name = %s",
                (tracking.application_name,),
            ).fetchone()
            if recorded is None or recorded[0] != tracking.notification_id:
                return None
        return [] if self.side_table else [int(p) for p, _, _ in found]

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        if self.side_table is None:
            sql = "SELECT stream, version, type, data, data_bytes FROM "
            sql += f"{self.datastore.table('events')} WHERE stream = %s"
        else:
            sql = (
                f"SELECT stream, version, type, NULL, data FROM {self.side_table} WHERE stream = %s"
            )
        params: list[Any] = [self.datastore.stream(originator_id)]
        sql = version_range(sql, params, "%s", gt=gt, lte=lte, desc=desc, limit=limit)
        originator = self.datastore.originator
        return [
            StoredEvent(originator(s), v, t, _state(x, xb))
            for s, v, t, x, xb in self.datastore.query(sql, params)
        ]


class PgApplicationRecorder(PgAggregateRecorder, ApplicationRecorder):
    """The log as an eventsourcing application sequence: notification id = position."""

    def __init__(self, datastore: PgDatastore) -> None:
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
        sql = "SELECT position, stream, version, type, type_version, data, data_bytes FROM "
        sql += f"{self.datastore.table('events')} WHERE TRUE"
        params: list[Any] = []
        if topics:
            sql += " AND type = ANY(%s)"
            params.append(list(topics))
        sql = position_range(
            sql, params, "%s", start=start, stop=stop, inclusive=inclusive_of_start, limit=limit
        )
        originator = self.datastore.originator
        return [
            RotaNotification(
                id=p,
                originator_id=originator(s),
                originator_version=v,
                topic=t,
                state=_state(x, b),
                type_version=tv,
            )
            for p, s, v, t, tv, x, b in self.datastore.query(sql, params)
        ]

    def max_notification_id(self) -> int | None:
        rows = self.datastore.query(f"SELECT max(position) FROM {self.datastore.table('events')}")
        return None if rows[0][0] is None else int(rows[0][0])

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return PgSubscription(self, gt=gt, topics=topics)


class PgSubscription(CommitSubscription[PgApplicationRecorder]):
    """Wakes the library's pull loop whenever any process commits to the log."""

    def _head(self, recorder: PgApplicationRecorder) -> int:
        return recorder.max_notification_id() or 0

    def _watch(self) -> None:
        try:
            super()._watch()
        except StoreError:
            self._has_been_notified.set()  # the pull loop reads again and raises the error


def _insert_tracking(tx: Tx, table: str, tracking: Tracking) -> None:
    cursor = tx.cursor.execute(
        f"INSERT INTO {table} AS t (application_name, notification_id) VALUES (%s, %s) "
        "ON CONFLICT (application_name) DO UPDATE SET notification_id = excluded.notification_id "
        "WHERE t.notification_id < excluded.notification_id",
        (tracking.application_name, tracking.notification_id),
    )
    if cursor.rowcount != 1:
        if tx.retrying:  # an earlier attempt whose acknowledgement was lost may have written it
            found = tx.cursor.execute(
                f"SELECT notification_id FROM {table} WHERE application_name = %s",
                (tracking.application_name,),
            ).fetchone()
            if found is not None and found[0] == tracking.notification_id:
                return
        raise IntegrityError(
            f"tracking for {tracking.application_name!r} is already at or beyond "
            f"{tracking.notification_id}"
        )


class PgTrackingRecorder(PgRecorder, TrackingRecorder):
    """Tracking positions, one row per upstream application, only ever moving forward."""

    def insert_tracking(self, tracking: Tracking) -> None:
        table = self.datastore.table("tracking")
        self.datastore.write(lambda tx: _insert_tracking(tx, table, tracking))

    def max_tracking_id(self, application_name: str) -> int | None:
        rows = self.datastore.query(
            f"SELECT notification_id FROM {self.datastore.table('tracking')} "
            "WHERE application_name = %s",
            (application_name,),
        )
        return int(rows[0][0]) if rows else None


class PgProcessRecorder(PgTrackingRecorder, PgApplicationRecorder, ProcessRecorder):
    """Events and the tracking position they answer, in one transaction."""

    def __init__(self, datastore: PgDatastore) -> None:
        PgApplicationRecorder.__init__(self, datastore)


class PgFactory(EsFactory[PgTrackingRecorder]):
    """The infrastructure factory eventsourcing finds in this module."""

    POSTGRES_URL = "POSTGRES_URL"
    POSTGRES_DBNAME = "POSTGRES_DBNAME"
    POSTGRES_HOST = "POSTGRES_HOST"
    POSTGRES_PORT = "POSTGRES_PORT"
    POSTGRES_USER = "POSTGRES_USER"
    POSTGRES_PASSWORD = "POSTGRES_PASSWORD"
    POSTGRES_LOCK_TIMEOUT = "POSTGRES_LOCK_TIMEOUT"
    POSTGRES_POOL_SIZE = "POSTGRES_POOL_SIZE"
    ROTA_POSTGRES_SCHEMA = "ROTA_POSTGRES_SCHEMA"

    aggregate_recorder_class = PgAggregateRecorder
    application_recorder_class = PgApplicationRecorder
    tracking_recorder_class = PgTrackingRecorder
    process_recorder_class = PgProcessRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        url, url_schema = split_schema(self._url())
        schema = self.env.get(self.ROTA_POSTGRES_SCHEMA) or url_schema or "rota"
        id_type = self.originator_id_type()
        settings: dict[str, Any] = {}
        for key, name, kind in (
            (self.POSTGRES_LOCK_TIMEOUT, "lock_timeout", float),
            (self.POSTGRES_POOL_SIZE, "pool_max", int),
        ):
            value = self.env.get(key)
            if value:
                try:
                    settings[name] = kind(value)
                except ValueError:
                    raise OSError(f"Invalid {key} {value!r}: expected a number") from None
        self.datastore = PgDatastore(url, schema, id_type, **settings)

    def _url(self) -> str:
        url = self.env.get(self.POSTGRES_URL)
        if url:
            return url
        dbname = self.env.get(self.POSTGRES_DBNAME)
        if not dbname:
            keys = ", ".join(self.env.create_keys(self.POSTGRES_URL))
            raise OSError(f"rota's PostgreSQL store needs a database: set one of {keys}")
        parts = {
            "dbname": dbname,
            "host": self.env.get(self.POSTGRES_HOST),
            "port": self.env.get(self.POSTGRES_PORT),
            "user": self.env.get(self.POSTGRES_USER),
            "password": self.env.get(self.POSTGRES_PASSWORD),
        }
        return psycopg.conninfo.make_conninfo(**{k: v for k, v in parts.items() if v})
