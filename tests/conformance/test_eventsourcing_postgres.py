"""The eventsourcing library's own recorder conformance cases, run on rota's PostgreSQL module.

The library's test cases, unchanged (`eventsourcing.tests.persistence`), with only the
`create_recorder()` hooks supplied (`es_cases`). Every test runs in its own schema, dropped
afterwards.
"""

from __future__ import annotations

import pytest
from postgres import drop_schema, new_schema_name, require_postgres

import rota.infrastructure.eventsourcing.postgres as es_postgres

from . import es_cases

MODULE = "rota.infrastructure.eventsourcing.postgres"
pytestmark = pytest.mark.postgres


class _TempSchema(es_cases.Store):
    factory_class = es_postgres.PgFactory
    _schema: str

    def open_store(self) -> None:
        require_postgres()
        self._schema = new_schema_name()

    def close_store(self) -> None:
        drop_schema(self._schema)

    def settings(self) -> dict[str, str]:
        return {
            "PERSISTENCE_MODULE": MODULE,
            "POSTGRES_URL": require_postgres(),
            "ROTA_POSTGRES_SCHEMA": self._schema,
        }


class TestAggregateRecorder(_TempSchema, es_cases.AggregateRecorderCases):
    pass


class TestSnapshotRecorder(_TempSchema, es_cases.SnapshotRecorderCases):
    pass


class TestApplicationRecorder(_TempSchema, es_cases.ApplicationRecorderCases):
    pass


class TestTrackingRecorder(_TempSchema, es_cases.TrackingRecorderCases):
    pass


class TestProcessRecorder(_TempSchema, es_cases.ProcessRecorderCases):
    pass


class TestNonInterleavingNotificationIDs(_TempSchema, es_cases.NonInterleavingNotificationIDsCases):
    pass


class _TrackingSubclass(es_postgres.PgTrackingRecorder):
    pass


class TestInfrastructureFactory(_TempSchema, es_cases.InfrastructureFactoryCases):
    aggregate_recorder_class = es_postgres.PgAggregateRecorder
    application_recorder_class = es_postgres.PgApplicationRecorder
    tracking_recorder_class = es_postgres.PgTrackingRecorder
    tracking_recorder_subclass_ = _TrackingSubclass
    process_recorder_class = es_postgres.PgProcessRecorder
