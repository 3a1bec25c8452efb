"""The eventsourcing library's own recorder conformance cases, run on rota's apsw module.

These are the library's test cases, unchanged (`eventsourcing.tests.persistence`), with only
the `create_recorder()` hooks supplied here: passing them makes rota's store a real
eventsourcing persistence module.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

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

from rota.infrastructure import es_apsw

MODULE = "rota.infrastructure.es_apsw"


class _TempStore:
    _dir: tempfile.TemporaryDirectory[str]
    _factories: list[Any]

    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self._factories = []
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        super().tearDown()  # type: ignore[misc]
        for factory in self._factories:
            factory.close()
        self._dir.cleanup()

    def factory(self) -> es_apsw.ApswFactory:
        env = Environment(
            env={"PERSISTENCE_MODULE": MODULE, "APSW_DBNAME": str(Path(self._dir.name) / "es.db")}
        )
        factory = InfrastructureFactory.construct(env)
        assert isinstance(factory, es_apsw.ApswFactory)
        self._factories.append(factory)
        return factory


class TestAggregateRecorder(_TempStore, AggregateRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().aggregate_recorder()


class TestSnapshotRecorder(_TempStore, AggregateRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().aggregate_recorder("snapshots")


class TestApplicationRecorder(_TempStore, ApplicationRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().application_recorder()

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestTrackingRecorder(_TempStore, TrackingRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().tracking_recorder()


class TestProcessRecorder(_TempStore, ProcessRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().process_recorder()


class TestNonInterleavingNotificationIDs(_TempStore, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> Any:
        return self.factory().application_recorder()


class _TrackingSubclass(es_apsw.ApswTrackingRecorder):
    pass


class TestInfrastructureFactory(InfrastructureFactoryTestCase[es_apsw.ApswFactory]):
    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.env = Environment(
            "TestCase",
            {"PERSISTENCE_MODULE": MODULE, "APSW_DBNAME": os.path.join(self._dir.name, "f.db")},
        )
        super().setUp()

    def tearDown(self) -> None:
        super().tearDown()
        self._dir.cleanup()

    def expected_factory_class(self) -> type[es_apsw.ApswFactory]:
        return es_apsw.ApswFactory

    def expected_aggregate_recorder_class(self) -> type[Any]:
        return es_apsw.ApswAggregateRecorder

    def expected_application_recorder_class(self) -> type[Any]:
        return es_apsw.ApswApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[Any]:
        return es_apsw.ApswTrackingRecorder

    def tracking_recorder_subclass(self) -> type[Any]:
        return _TrackingSubclass

    def expected_process_recorder_class(self) -> type[Any]:
        return es_apsw.ApswProcessRecorder
