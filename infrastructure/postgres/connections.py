"""The PostgreSQL store's pooled connections: sessions set up for rota, retries, fork rules.

Every pooled connection is set up with `lock_timeout` (the session-wide equivalent of
`SET LOCAL` in each transaction), so a waiting writer surfaces as `StoreUnavailable` (after
the retries below), never as a hang; and with `idle_in_transaction_session_timeout` at
twice that (at least 1 s), so a writer paused mid-transaction (a stopped process) loses its
session and releases the lock instead of stalling every host. `synchronous` `normal` sets
`synchronous_commit=off` (a server crash may lose the last acknowledged commits, never
corrupt the log); `full` and `extra` keep the server's setting.

Retries: serialization failures, deadlocks, lock timeouts and dropped connections
(`TRANSIENT`) are retried up to `max_retries` times (10 ms doubling, with jitter), each
counted in `metrics["retries"]`. A connection must not cross `fork()` (`ForkedConnection`).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from rota.application.errors import ForkedConnection, StoreClosed, StoreError, StoreUnavailable

SYNCHRONOUS_COMMIT = {"normal": "off", "full": None, "extra": None}  # None: the server's
# Worth another attempt: lost connections, lock timeouts, serialization failures, deadlocks.
TRANSIENT = (psycopg.OperationalError, pg_errors.IdleInTransactionSessionTimeout)


class LogConnections:
    """The pool of one store's connections to schema `schema`; see the module docstring."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        pool_min: int,
        pool_max: int,
        lock_timeout: float,
        max_retries: int,
        connect_timeout: float,
        synchronous_commit: str | None,
    ) -> None:
        self.schema, self.lock_timeout, self.max_retries = schema, lock_timeout, max_retries
        self.connect_timeout = connect_timeout
        self.metrics: dict[str, int] = {"retries": 0, "conflicts": 0, "delivery_conflicts": 0}
        self.closed = False
        self._conninfo, self._synchronous = conninfo, synchronous_commit
        self._pid = os.getpid()
        self._metrics_lock = threading.Lock()
        self._timeout = max(2, round(connect_timeout))
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo, min_size=pool_min, max_size=pool_max, configure=self._configure,
            kwargs={"autocommit": True, "connect_timeout": self._timeout},
            timeout=connect_timeout, name=f"rota-{schema}", open=False,
        )  # fmt: skip

    def open(self, then: Callable[[], None]) -> None:
        """Open the pool and run `then` (the schema's creation); on any failure close the
        pool again, and report a pool that timed out with the server's own reason."""
        try:
            self._probe()
            self._pool.open(wait=True, timeout=self.connect_timeout)
            then()
        except BaseException as exc:
            self._pool.close()
            if not isinstance(exc, PoolTimeout):
                raise
            reason = str(exc)
            try:  # the pool only says it timed out: ask the server for the reason
                psycopg.connect(self._conninfo, connect_timeout=self._timeout).close()
            except psycopg.Error as error:
                reason = str(error).strip()
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL (schema {self.schema!r}): {reason}"
            ) from exc

    def _probe(self) -> None:
        """One direct connection first: a server that refuses, a host that does not resolve
        or a role or database that does not exist is one `StoreUnavailable` line at once,
        not the pool's retries (a warning each) until its timeout."""
        try:
            psycopg.connect(self._conninfo, connect_timeout=self._timeout).close()
        except psycopg.Error as error:
            reason = " ".join(str(error).split())
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL (schema {self.schema!r}): {reason}"
            ) from None

    @property
    def forked(self) -> bool:
        """Whether this is a child process of the one that opened the pool."""
        return os.getpid() != self._pid

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        ms = max(1, round(self.lock_timeout * 1000))
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false), set_config('TimeZone', 'UTC', false), "
            "set_config('idle_in_transaction_session_timeout', %s, false)",
            (f"{ms}ms", f"{max(1000, 2 * ms)}ms"),
        )
        if self._synchronous is not None:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", (self._synchronous,))

    def check(self) -> None:
        if self.closed:
            raise StoreClosed(f"the PostgreSQL store (schema {self.schema!r}) is closed")
        if self.forked:
            raise ForkedConnection(
                "this store was opened in another process; a PostgreSQL connection must not "
                "cross fork(): open the store again in the child"
            )

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        self.check()
        try:
            conn = self._pool.getconn()
        except PoolClosed as exc:
            raise StoreClosed(f"the PostgreSQL store (schema {self.schema!r}) is closed") from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(
                f"no PostgreSQL connection within {self.connect_timeout}s: {exc}"
            ) from exc
        try:
            yield conn
        except BaseException:
            if conn.broken:
                with contextlib.suppress(Exception):
                    self._pool.check()  # drop the pool's other dead connections too
            elif conn.info.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            raise
        finally:
            with contextlib.suppress(Exception):
                self._pool.putconn(conn)

    def count(self, key: str) -> None:
        with self._metrics_lock:
            self.metrics[key] = self.metrics.get(key, 0) + 1

    def backoff(self, attempt: int, exc: psycopg.Error) -> None:
        if attempt > self.max_retries:
            if isinstance(exc, pg_errors.LockNotAvailable):
                raise StoreUnavailable(
                    f"the log's write lock (schema {self.schema!r}) stayed held by another "
                    f"transaction beyond lock_timeout={self.lock_timeout}s on {attempt} attempts; "
                    "a writer may be stuck (see pg_stat_activity)"
                ) from exc
            raise StoreUnavailable(
                f"the PostgreSQL store (schema {self.schema!r}) failed {attempt} attempts: {exc}"
            ) from exc
        self.count("retries")
        time.sleep(0.01 * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        attempt = 0
        while True:
            try:
                with self.connection() as conn:
                    return conn.execute(sql, params).fetchall()
            except TRANSIENT as exc:
                attempt += 1
                self.backoff(attempt, exc)
            except psycopg.Error as exc:
                raise StoreError(f"a read of schema {self.schema!r} failed: {exc}") from exc

    def close(self) -> None:
        self._pool.close(timeout=2.0)
