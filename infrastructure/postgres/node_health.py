"""What a PostgreSQL connection reached, and what a failure says about the server behind it.

Failover breaks a connection pool in known ways (docs/postgresql.md, "Failover"): pooled
connections stay on a demoted primary, which answers every write with SQLSTATE 25006 (also
`cannot execute ... during recovery`) for as long as they live (river#1225); a server
shutting down ends its sessions (57P01, 57P02) and refuses new ones while it starts
(57P03); a route that dies, or a server that freezes, leaves a socket that accepts the
request and never answers (a half-open connection). So:

- `classify(exc)` names what a failure says about the node: `store_read_only` (it answers
  but takes no writes) or `store_unavailable` (it is gone or cannot be reached); None for
  every other error (the statement's own problem, the connection is fine);
- `session_check` runs on every new connection, with its session settings, in one round
  trip: it reports a server in recovery (`pg_is_in_recovery()`) or read-only
  (`transaction_read_only`, what `default_transaction_read_only` or recovery makes it);
- `ReplyTimeoutConnection` bounds the wait for any answer (`reply_timeout` seconds): a
  connection that gets none is closed and the wait raises `OperationalError`, so a pass
  never hangs on a socket no one will ever answer. TCP keepalives cannot: a frozen server's
  kernel, or a proxy's, acknowledges every byte.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors

READ_ONLY = "store_read_only"
UNAVAILABLE = "store_unavailable"
# Sessions ended, or refused, by a server shutting down, crashing or starting.
GONE = frozenset({"57P01", "57P02", "57P03"})
RECOVERY_WORDS = ("during recovery", "recovery is in progress", "read-only transaction")


def classify(exc: BaseException) -> str | None:
    """`store_read_only`, `store_unavailable` or None (see the module docstring)."""
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate or ""
    if state == "25006":
        return READ_ONLY
    text = str(exc)
    if any(words in text for words in RECOVERY_WORDS):
        return READ_ONLY
    if state in GONE or state.startswith("08"):
        return UNAVAILABLE
    if isinstance(exc, pg_errors.IdleInTransactionSessionTimeout):
        return None  # this session's own timeout: the server is fine
    if isinstance(exc, psycopg.OperationalError) and not state:
        return UNAVAILABLE  # the connection broke (no answer, reset, closed)
    return None


def session_check(
    conn: psycopg.Connection[Any], settings: str = "", params: tuple[Any, ...] = ()
) -> str:
    """Apply the session `settings` (a SELECT list of `set_config` calls ending in a comma)
    and read whether the server takes writes, in one round trip; '' when it does, else why
    not."""
    row = conn.execute(
        f"SELECT {settings} pg_is_in_recovery(), current_setting('transaction_read_only')",
        params,
    ).fetchone()
    assert row is not None
    recovering, read_only = row[-2], row[-1]
    if recovering:
        return "the server is in recovery (a replica or a node not yet promoted)"
    if read_only == "on":
        return "the server is read-only (default_transaction_read_only is on: a demoted primary?)"
    return ""


class ReplyTimeoutConnection(psycopg.Connection[Any]):
    """A connection whose every wait for the server ends after `reply_timeout` seconds
    (None: never): the connection is closed and `OperationalError` raised."""

    reply_timeout: float | None = None

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        limit = timeout if timeout is not None else self.reply_timeout
        try:
            return super().wait(gen, interval, limit)
        except pg_errors._WaitTimeout:
            if timeout is not None:
                raise  # the caller's own limit (psycopg's cancel): its handling applies
            self.close()
            raise psycopg.OperationalError(
                f"the server did not answer within {limit:g} s (reply_timeout): the "
                "connection was dropped (a half-open connection or a frozen server)"
            ) from None


def with_reply_timeout(seconds: float | None) -> type[ReplyTimeoutConnection]:
    """A connection class whose waits end after `seconds`."""
    return type("Connection", (ReplyTimeoutConnection,), {"reply_timeout": seconds})
