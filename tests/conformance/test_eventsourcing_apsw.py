"""The eventsourcing library's own recorder conformance cases, run on rota's apsw module.

These are the library's test cases, unchanged (`eventsourcing.tests.persistence`), with only
the `create_recorder()` hooks supplied (`es_cases`): passing them makes rota's store a real
eventsourcing persistence module. Every test runs on its own database file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import rota.infrastructure.eventsourcing.sqlite as es_apsw

from . import es_cases

MODULE = "rota.infrastructure.eventsourcing.sqlite"


class _TempStore(es_cases.Store):
    factory_class = es_apsw.ApswFactory
    _dir: tempfile.TemporaryDirectory[str]

    def open_store(self) -> None:
        self._dir = tempfile.TemporaryDirectory()

    def close_store(self) -> None:
        self._dir.cleanup()

    def settings(self) -> dict[str, str]:
        return {"PERSISTENCE_MODULE": MODULE, "APSW_DBNAME": str(Path(self._dir.name) / "es.db")}


class TestAggregateRecorder(_TempStore, es_cases.AggregateRecorderCases):
    pass


class TestSnapshotRecorder(_TempStore, es_cases.SnapshotRecorderCases):
    pass


class TestApplicationRecorder(_TempStore, es_cases.ApplicationRecorderCases):
    pass


class TestTrackingRecorder(_TempStore, es_cases.TrackingRecorderCases):
    pass


class TestProcessRecorder(_TempStore, es_cases.ProcessRecorderCases):
    pass


class TestNonInterleavingNotificationIDs(_TempStore, es_cases.NonInterleavingNotificationIDsCases):
    pass


class _TrackingSubclass(es_apsw.ApswTrackingRecorder):
    pass


class TestInfrastructureFactory(_TempStore, es_cases.InfrastructureFactoryCases):
    aggregate_recorder_class = es_apsw.ApswAggregateRecorder
    application_recorder_class = es_apsw.ApswApplicationRecorder
    tracking_recorder_class = es_apsw.ApswTrackingRecorder
    tracking_recorder_subclass_ = _TrackingSubclass
    process_recorder_class = es_apsw.ApswProcessRecorder
