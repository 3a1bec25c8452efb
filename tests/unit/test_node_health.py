"""What a PostgreSQL failure says about the server behind the connection (issue 32): a
read-only or recovering server, a server gone or unreachable, or nothing about it."""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors

from rota.infrastructure.postgres.node_health import READ_ONLY, UNAVAILABLE, classify


def test_a_read_only_or_recovering_server() -> None:
    assert classify(pg_errors.ReadOnlySqlTransaction("cannot execute UPDATE")) == READ_ONLY
    during = pg_errors.FeatureNotSupported("cannot set transaction read-write mode during recovery")
    assert classify(during) == READ_ONLY
    assert classify(psycopg.OperationalError("recovery is in progress")) == READ_ONLY


def test_a_server_gone_or_unreachable() -> None:
    assert classify(pg_errors.AdminShutdown("terminating connection")) == UNAVAILABLE
    assert classify(pg_errors.CrashShutdown("crash")) == UNAVAILABLE
    assert classify(pg_errors.CannotConnectNow("the database system is starting up")) == UNAVAILABLE
    assert classify(pg_errors.ConnectionFailure("connection failure")) == UNAVAILABLE
    assert classify(psycopg.OperationalError("server closed the connection")) == UNAVAILABLE


def test_errors_that_say_nothing_about_the_server() -> None:
    assert classify(pg_errors.SerializationFailure("could not serialize")) is None
    assert classify(pg_errors.LockNotAvailable("lock timeout")) is None
    assert classify(pg_errors.UniqueViolation("duplicate key")) is None
    assert classify(pg_errors.IdleInTransactionSessionTimeout("timeout")) is None
    assert classify(ValueError("not a driver error")) is None
