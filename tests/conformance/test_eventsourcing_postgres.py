"""The eventsourcing library's own recorder conformance cases, run on rota's PostgreSQL module.

The library's test cases, unchanged (`eventsourcing.tests.persistence`), with only the
`create_recorder()` hooks supplied here. Every test runs in its own schema, dropped afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.tests.persistence import (
    AggregateRecorderTestCase,
    ApplicationRecorderTestCase,
    InfrastructureFactoryTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)
from eventsourcing.utils import Environment
from postgres import drop_schema, new_schema_name, require_postgres

from rota.infrastructure import es_postgres

MODULE = "rota.infrastructure.es_postgres"
pytestmark = pytest.mark.postgres


def _env(schema: str, name: str = "") -> Environment:
    settings = {
        "PERSISTENCE_MODULE": MODULE,
        "POSTGRES_URL": require_postgres(),
        "ROTA_POSTGRES_SCHEMA": schema,
    }
    return Environment(name, settings) if name else Environment(env=settings)


class _TempSchema:
    _schema: str
    _factories: list[Any]

    def setUp(self) -> None:
        require_postgres()
        self._schema = new_schema_name()
        self._factories = []
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        try:
            super().tearDown()  # type: ignore[misc]
        finally:
            for factory in self._factories:
                factory.close()
            drop_schema(self._schema)

    def factory(self) -> es_postgres.PgFactory:
        factory = InfrastructureFactory.construct(_env(self._schema))
        assert isinstance(factory, es_postgres.PgFactory)
        self._factories.append(factory)
        return factory


class TestAggregateRecorder(_TempSchema, AggregateRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().aggregate_recorder()


class TestSnapshotRecorder(_TempSchema, AggregateRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().aggregate_recorder("snapshots")


class TestApplicationRecorder(_TempSchema, ApplicationRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().application_recorder()

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestTrackingRecorder(_TempSchema, TrackingRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().tracking_recorder()


class TestProcessRecorder(_TempSchema, ProcessRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().process_recorder()


class TestNonInterleavingNotificationIDs(_TempSchema, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> Any:
        return self.factory().application_recorder()


class _TrackingSubclass(es_postgres.PgTrackingRecorder):
    pass


class TestInfrastructureFactory(InfrastructureFactoryTestCase[es_postgres.PgFactory]):
    def setUp(self) -> None:
        require_postgres()
        self._schema = new_schema_name()
        self.env = _env(self._schema, "TestCase")
        super().setUp()

    def tearDown(self) -> None:
        try:
            super().tearDown()
        finally:
            drop_schema(self._schema)

    def expected_factory_class(self) -> type[es_postgres.PgFactory]:
        return es_postgres.PgFactory

    def expected_aggregate_recorder_class(self) -> type[Any]:
        return es_postgres.PgAggregateRecorder

    def expected_application_recorder_class(self) -> type[Any]:
        return es_postgres.PgApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[Any]:
        return es_postgres.PgTrackingRecorder

    def tracking_recorder_subclass(self) -> type[Any]:
        return _TrackingSubclass

    def expected_process_recorder_class(self) -> type[Any]:
        return es_postgres.PgProcessRecorder
