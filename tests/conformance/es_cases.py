"""The eventsourcing library's recorder conformance cases, wired once for every rota store.

The library's test cases run unchanged (`eventsourcing.tests.persistence`); this module only
supplies their `create_recorder()` hooks. A store's test module names its store in a `Store`
subclass (a throwaway store per test: `open_store()` before, `close_store()` after, and the
environment that selects it) and crosses it with each case class here:
`class TestAggregateRecorder(_TempStore, es_cases.AggregateRecorderCases): pass`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
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


class Store(ABC):
    """One throwaway store per test, selected by `settings()`; `factory_class` is its factory."""

    factory_class: type[InfrastructureFactory[Any]]

    @abstractmethod
    def open_store(self) -> None: ...

    @abstractmethod
    def close_store(self) -> None: ...

    @abstractmethod
    def settings(self) -> dict[str, str]: ...


class _Recorders(Store):
    _factories: list[Any]

    def setUp(self) -> None:
        self.open_store()
        self._factories = []
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        try:
            super().tearDown()  # type: ignore[misc]
        finally:
            for factory in self._factories:
                factory.close()
            self.close_store()

    def factory(self) -> Any:
        factory = InfrastructureFactory.construct(Environment(env=self.settings()))
        assert isinstance(factory, self.factory_class)
        self._factories.append(factory)
        return factory


class AggregateRecorderCases(_Recorders, AggregateRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().aggregate_recorder()


class SnapshotRecorderCases(_Recorders, AggregateRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().aggregate_recorder("snapshots")


class ApplicationRecorderCases(_Recorders, ApplicationRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().application_recorder()

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TrackingRecorderCases(_Recorders, TrackingRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().tracking_recorder()


class ProcessRecorderCases(_Recorders, ProcessRecorderTestCase):
    def create_recorder(self) -> Any:
        return self.factory().process_recorder()


class NonInterleavingNotificationIDsCases(_Recorders, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> Any:
        return self.factory().application_recorder()


class InfrastructureFactoryCases(Store, InfrastructureFactoryTestCase[Any]):
    """The factory case; the store module names the classes it expects, explicitly."""

    aggregate_recorder_class: type[Any]
    application_recorder_class: type[Any]
    tracking_recorder_class: type[Any]
    tracking_recorder_subclass_: type[Any]
    process_recorder_class: type[Any]

    def setUp(self) -> None:
        self.open_store()
        self.env = Environment("TestCase", self.settings())
        super().setUp()

    def tearDown(self) -> None:
        try:
            super().tearDown()
        finally:
            self.close_store()

    def expected_factory_class(self) -> type[Any]:
        return self.factory_class

    def expected_aggregate_recorder_class(self) -> type[Any]:
        return self.aggregate_recorder_class

    def expected_application_recorder_class(self) -> type[Any]:
        return self.application_recorder_class

    def expected_tracking_recorder_class(self) -> type[Any]:
        return self.tracking_recorder_class

    def tracking_recorder_subclass(self) -> type[Any]:
        return self.tracking_recorder_subclass_

    def expected_process_recorder_class(self) -> type[Any]:
        return self.process_recorder_class
