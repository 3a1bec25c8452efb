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

Failover (`node_health`): every new connection is checked, with its session settings, in one
round trip: a server in recovery or read-only is refused (the connection closed, the pool
tries again) and the store's own check of its log runs (`on_connect`). A failure that says
the server is gone or read-only (`node_health.classify`) closes that connection and
replaces the whole pool (`reset`: its siblings reached the same node, and its reconnection
backoff may have grown long), counted in `metrics["reconnects"]`; `found` holds what the
connections last found (`StoreState`), and `probe` asks the server now on a connection of
its own. Every wait for an answer ends after `reply_timeout` seconds (a half-open
connection is dropped, not waited on for ever).
"""

from __future__ import annotations

import contextlib
import logging
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

from rota.application.errors import (
    ForkedConnection,
    PortCode,
    StoreClosed,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
)
from rota.application.ports import StoreState
from rota.application.ports.records import WRITABLE
from rota.infrastructure.postgres.node_health import (
    READ_ONLY,
    UNAVAILABLE,
    classify,
    session_check,
    with_reply_timeout,
)

SYNCHRONOUS_COMMIT = {"normal": "off", "full": None, "extra": None}  # None: the server's
# Worth another attempt: lost connections, lock timeouts, serialization failures, deadlocks.
TRANSIENT = (psycopg.OperationalError, pg_errors.IdleInTransactionSessionTimeout)
Check = Callable[[psycopg.Connection[Any]], object]
# TCP keepalives: a connection whose peer vanished without a word (a dead route) ends in
# about 25 s even while idle (`reply_timeout` bounds the waits for an answer).
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
REFUSED_LOGIN = ("does not exist", "authentication failed", "no pg_hba.conf entry", "password")


class QuietReconnects(logging.Filter):
    """psycopg_pool warns once per failed connection attempt of a pool; during a failover
    that is several lines a second. rota says itself, once per change, that its store is
    unreachable or read-only (`found`; a daemon's `rota.store` lines), so the pool's own
    lines about rota's pools are demoted to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and "'rota-" in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _quiet_pool_warnings() -> None:
    """Install `QuietReconnects` once (when the first store opens, not at import)."""
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, QuietReconnects) for f in pool_log.filters):
        pool_log.addFilter(QuietReconnects())


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


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
        reply_timeout: float | None = None,
    ) -> None:
        self.schema, self.lock_timeout, self.max_retries = schema, lock_timeout, max_retries
        self.connect_timeout = connect_timeout
        self.metrics: dict[str, int] = {
            "retries": 0, "conflicts": 0, "delivery_conflicts": 0, "reconnects": 0
        }  # fmt: skip
        self.closed = False
        self.found: StoreState = WRITABLE  # what the connections last found
        self.on_connect: Check | None = None  # the store's check of its log, per connection
        self.on_reset: Callable[[], None] | None = None  # after the pool was replaced
        self._conninfo, self._synchronous = conninfo, synchronous_commit
        self._pid = os.getpid()
        self._metrics_lock = threading.Lock()
        self._reset_lock = threading.Lock()
        self._timeout = max(2, round(connect_timeout))
        self._sizes = (pool_min, pool_max)
        self.connection_class = with_reply_timeout(reply_timeout)
        _quiet_pool_warnings()
        self._pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        # reconnect_timeout: a pool that cannot connect gives up after a few tries (1, 2, 4
        # s apart) instead of backing off for minutes; the next request grows it again at
        # once, and `reset` replaces it when the server answers again.
        pool_min, pool_max = self._sizes
        return ConnectionPool(
            self._conninfo, min_size=pool_min, max_size=pool_max, configure=self._configure,
            kwargs={"autocommit": True, "connect_timeout": self._timeout, **KEEPALIVES},
            connection_class=self.connection_class, timeout=self.connect_timeout,
            name=f"rota-{self.schema}", open=False, reconnect_timeout=max(8.0, 2 * self._timeout),
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
            with psycopg.connect(self._conninfo, connect_timeout=self._timeout) as conn:
                why = session_check(conn)
        except psycopg.Error as error:
            reason = one_line(error)
            # A role or database that does not exist, or a refused login, will not come
            # right by waiting (a `rota run` waits for the others: a server down, starting).
            permanent = any(words in reason for words in REFUSED_LOGIN)
            raise (StoreError if permanent else StoreUnavailable)(
                f"cannot connect to PostgreSQL (schema {self.schema!r}): {reason}",
                code=PortCode.STORE_UNAVAILABLE,
            ) from None
        if why:
            self.note(StoreState(READ_ONLY, why))
            raise StoreReadOnly(f"cannot use PostgreSQL (schema {self.schema!r}): {why}")

    @property
    def forked(self) -> bool:
        """Whether this is a child process of the one that opened the pool."""
        return os.getpid() != self._pid

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Set the session up and check the server it reached (one round trip), then run
        the store's check of its log: a read-only or recovering server is refused."""
        ms = max(1, round(self.lock_timeout * 1000))
        settings = (
            "set_config('lock_timeout', %s, false), set_config('TimeZone', 'UTC', false), "
            "set_config('idle_in_transaction_session_timeout', %s, false),"
        )
        params: tuple[Any, ...] = (f"{ms}ms", f"{max(1000, 2 * ms)}ms")
        if self._synchronous is not None:
            settings += " set_config('synchronous_commit', %s, false),"
            params += (self._synchronous,)
        why = session_check(conn, settings, params)
        if why:
            self.note(StoreState(READ_ONLY, why))
            conn.close()
            raise StoreReadOnly(f"refused a connection to PostgreSQL: {why}")
        if self.on_connect is not None:
            self.on_connect(conn)
        self.note(WRITABLE)

    @contextlib.contextmanager
    def lock_wait(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """The statement run inside may first wait up to `lock_timeout` for the log's
        lock: its reply timeout is that much longer."""
        base = getattr(conn, "reply_timeout", None)
        if base is None:
            yield
            return
        conn.reply_timeout = base + self.lock_timeout  # type: ignore[attr-defined]
        try:
            yield
        finally:
            conn.reply_timeout = base  # type: ignore[attr-defined]

    def note(self, state: StoreState) -> None:
        """What the connections found now (a server read-only, gone, or fine again)."""
        if self.found != state:
            self.found = state

    def probe(self, check: Check) -> StoreState:
        """Ask the server now, on a connection of this call's own (the pool's may be waiting
        out a reconnection backoff): reachable, taking writes, and `check` (the store's
        check of its log) passes. The state found; when it is writable after it was not, the
        pool is replaced so its connections are made now."""
        before = self.found
        try:
            with self.connection_class.connect(
                self._conninfo, autocommit=True, connect_timeout=self._timeout
            ) as conn:
                why = session_check(conn)
                if not why:
                    check(conn)
        except psycopg.Error as exc:
            state = StoreState(classify(exc) or UNAVAILABLE, one_line(exc))
        else:
            state = StoreState(READ_ONLY, why) if why else WRITABLE
        self.note(state)
        if state.writable and not before.writable:
            self.reset()
        return state

    def reset(self) -> None:
        """Replace the pool: every connection is made again, to the server the address
        reaches now; the old pool's connections are closed (in use: when returned)."""
        with self._reset_lock:
            if self.closed:
                return
            old, self._pool = self._pool, self._new_pool()
            self._pool.open(wait=False)
        self.count("reconnects")
        closing = threading.Thread(target=old.close, kwargs={"timeout": 2.0}, daemon=True)
        closing.start()
        if self.on_reset is not None:
            self.on_reset()

    def _lost(self, pool: ConnectionPool[Any], conn: psycopg.Connection[Any], kind: str,
              exc: BaseException) -> None:  # fmt: skip
        """`conn` failed in a way that says its server is gone or read-only: close it, and
        replace the pool it came from (once) so its siblings go too."""
        with contextlib.suppress(Exception):
            conn.close()
        self.note(StoreState(kind, one_line(exc)))
        if pool is self._pool:
            self.reset()

    def check(self) -> None:
        if self.closed:
            raise StoreClosed(f"the PostgreSQL store (schema {self.schema!r}) is closed")
        if self.forked:
            raise ForkedConnection(
                "this store was opened in another process; a PostgreSQL connection must not "
                "cross fork(): open the store again in the child"
            )

    def _getconn(self) -> tuple[ConnectionPool[Any], psycopg.Connection[Any]]:
        for _ in range(3):  # a pool replaced meanwhile is closed: take the new one's
            pool = self._pool
            try:
                return pool, pool.getconn()
            except PoolClosed as exc:
                if self.closed or pool is self._pool:
                    raise StoreClosed(
                        f"the PostgreSQL store (schema {self.schema!r}) is closed"
                    ) from exc
            except PoolTimeout as exc:
                found = self.found
                if found.code == READ_ONLY:
                    raise StoreReadOnly(
                        f"no writable PostgreSQL connection within {self.connect_timeout}s: "
                        f"{found.reason}"
                    ) from exc
                self.note(StoreState(UNAVAILABLE, f"no connection within {self.connect_timeout}s"))
                raise StoreUnavailable(
                    f"no PostgreSQL connection within {self.connect_timeout}s: {exc}"
                ) from exc
        raise StoreUnavailable(f"the PostgreSQL store (schema {self.schema!r}) kept reconnecting")

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        self.check()
        pool, conn = self._getconn()
        try:
            yield conn
        except BaseException as exc:
            kind = classify(exc)
            if kind is not None:
                self._lost(pool, conn, kind, exc)
            elif conn.broken:
                with contextlib.suppress(Exception):
                    pool.check()  # drop the pool's other dead connections too
            elif not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            raise
        finally:
            with contextlib.suppress(Exception):
                pool.putconn(conn)

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
            failed = StoreReadOnly if classify(exc) == READ_ONLY else StoreUnavailable
            raise failed(
                f"the PostgreSQL store (schema {self.schema!r}) failed {attempt} attempts: "
                f"{one_line(exc)}"
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
                if classify(exc) is None:
                    raise StoreError(f"a read of schema {self.schema!r} failed: {exc}") from exc
                attempt += 1
                self.backoff(attempt, exc)

    def close(self) -> None:
        with self._reset_lock:
            self.closed = True
            pool = self._pool
        pool.close(timeout=2.0)
