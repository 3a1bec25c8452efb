"""Follow a live rota log with eventsourcing's own projection runner.

`RotaLog` is an eventsourcing `Application` over a rota log (SQLite or PostgreSQL, through
this package's persistence modules) whose mapper decodes rota's rows as rota's typed
events (`rota.domain.events`, upcast exactly as rota replays them), so a user's
`eventsourcing.projection.Projection` can dispatch on them (`@singledispatchmethod`) and an
`eventsourcing.projection.ProjectionRunner` can build a read model from the log, live, and
resume from its tracking position after a restart. Rows an eventsourcing application wrote
into the log (schema version 0) go through the stock mapper.

The application only reads: it never appends to the rota log.

`RotaLog.env_for(url)` gives the environment that points eventsourcing at a rota store
URL. `ReadModel` is a tracking recorder a read model can extend: `write(tracking, body)`
runs `body(cursor)` and records the tracking position in one transaction, so the read
model is exactly-once and restartable. docs/guide.md has a complete example.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import apsw
from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, StoredEvent, Tracking

from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.eventsourcing.common import RotaNotification
from rota.infrastructure.eventsourcing.sqlite import ApswTrackingRecorder, insert_tracking_row
from rota.infrastructure.store_url import backend


class RotaMapper(Mapper[Any]):
    """Rows of the rota log as rota's typed events; other rows as the stock mapper has them."""

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        version = getattr(stored_event, "type_version", 0)
        if isinstance(stored_event, RotaNotification) and version > 0:
            return DEFAULT_CODEC.decode(
                stored_event.topic, version, stored_event.state, stored_event.id
            )
        return super().to_domain_event(stored_event)


class RotaLog(Application[Any]):
    """A rota log as an eventsourcing application to follow (read only)."""

    name = "rota"

    def construct_mapper(self) -> Mapper[Any]:
        return RotaMapper(transcoder=self.construct_transcoder())

    @staticmethod
    def env_for(url: str) -> dict[str, str]:
        """The environment that points `RotaLog` at the rota store `url`."""
        text_ids = {"ORIGINATOR_ID_TYPE": "text"}  # rota's streams are names, not UUIDs
        return {**backend(url).follow_env(), **text_ids}

    def save(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("RotaLog only reads the rota log; rota appends to it")


class ReadModel(ApswTrackingRecorder):
    """A read model in an SQLite file of its own, with its tracking position beside it.

    Subclass it: add your tables in `tables` (CREATE statements), write with
    `write(tracking, body)` and read with `read(sql, params)`.
    """

    tables: ClassVar[tuple[str, ...]] = ()

    def create_table(self) -> None:
        super().create_table()
        for statement in self.tables:
            self.datastore.write(lambda cursor, sql=statement: cursor.execute(sql))

    def write(self, tracking: Tracking, body: Callable[[apsw.Cursor], None]) -> None:
        """Run `body(cursor)` and record `tracking` in one transaction (exactly once: a
        position already recorded raises eventsourcing's `IntegrityError`)."""

        def both(cursor: apsw.Cursor) -> None:
            insert_tracking_row(cursor, tracking)
            body(cursor)

        self.datastore.write(both)

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.datastore.query(sql, params)


__all__ = ["ReadModel", "RotaLog", "RotaMapper"]
