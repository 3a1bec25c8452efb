"""The PostgreSQL store on a server that fails over, without a second server: on the shared
test server, in a schema of its own (issue 32, items 2 and 3).

- a log that lost events this store saw (rows deleted behind its back, as a promoted replica
  lacks them) refuses every write and read of events (`log_regressed`, naming the
  positions), writes nothing, and goes on by itself once the rows are back;
- a head pinned from a checkpoint (`known_head`) is judged the same way, a fork too;
- a server that takes no writes is refused at open (`store_read_only`), and a pooled
  connection that turns read-only is dropped (with its pool) and the write goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest
from contract.helpers import submitted
from postgres import admin_execute, schema_url, temporary_schema

from rota.application.errors import LogRegressed, StoreReadOnly
from rota.infrastructure.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def schema() -> Iterator[str]:
    with temporary_schema() as name:
        yield name


def _lose(schema: str, after: int) -> list[tuple[object, ...]]:
    """Delete the events after `after` (and move the head), as a promoted replica that never
    received them; the rows deleted, to put back."""
    rows = admin_execute(f'SELECT * FROM "{schema}".events WHERE position > %s', (after,))
    admin_execute(f'DELETE FROM "{schema}".events WHERE position > %s', (after,))
    (last,) = admin_execute(f'SELECT hash FROM "{schema}".events WHERE position = %s', (after,))
    admin_execute(f'UPDATE "{schema}".head SET position = %s, hash = %s', (after, last[0]))
    return rows


def _put_back(schema: str, rows: list[tuple[object, ...]]) -> None:
    marks = ", ".join(["%s"] * len(rows[0]))
    for row in rows:
        admin_execute(f'INSERT INTO "{schema}".events VALUES ({marks})', row)
    top = max(rows, key=lambda r: int(r[0]))  # type: ignore[call-overload]
    admin_execute(f'UPDATE "{schema}".head SET position = %s, hash = %s', (top[0], top[-1]))


def test_a_log_that_lost_what_this_store_saw_takes_no_write_until_it_is_back(
    schema: str,
) -> None:
    with PostgresStore(schema_url(schema)) as store:
        for n in range(5):
            store.append([submitted(f"w{n}")])
        assert store.head().position == 5
        rows = _lose(schema, 3)
        with pytest.raises(LogRegressed) as refused:
            store.append([submitted("after")])
        assert refused.value.code == "log_regressed"
        assert refused.value.missing == (4, 5) and refused.value.head == 3
        assert "positions 4..5 (2 events" in str(refused.value)
        assert "export --from 3" in str(refused.value)
        assert admin_execute(f'SELECT max(position) FROM "{schema}".events') == [(3,)]
        assert store.state().code == "log_regressed"
        with pytest.raises(LogRegressed):
            store.read(0)  # events read now could be another history's
        assert store.probe().code == "log_regressed"
        _put_back(schema, rows)
        assert store.probe().writable
        store.append([submitted("after")])
        assert [e.position for e in store.read(3)] == [4, 5, 6]


def test_a_checkpoint_pinned_beyond_the_log_or_off_its_chain_is_a_regression(
    schema: str,
) -> None:
    with PostgresStore(schema_url(schema)) as writer:
        for n in range(4):
            writer.append([submitted(f"w{n}")])
        head = writer.head()
    with PostgresStore(schema_url(schema)) as fresh:  # knows nothing: a new process
        assert fresh.known_head(head.position, head.hash).writable
        assert fresh.known_head(9, "0" * 64).code == "log_regressed"  # a checkpoint at 9
        with pytest.raises(LogRegressed) as refused:
            fresh.append([submitted("more")])
        assert refused.value.missing == (5, 9)
    with PostgresStore(schema_url(schema)) as other:
        found = other.known_head(2, "f" * 64)  # another hash at position 2: a fork
        assert found.code == "log_regressed"
        assert "agrees up to position 0" in found.reason


def test_a_read_only_server_is_refused_at_open(schema: str) -> None:
    read_only = quote("-c default_transaction_read_only=on")
    with pytest.raises(StoreReadOnly) as refused:
        PostgresStore(f"{schema_url(schema)}&options={read_only}")
    assert refused.value.code == "store_read_only"
    assert "read-only" in str(refused.value)


def test_a_pooled_connection_that_turns_read_only_is_dropped_and_the_write_goes_on(
    schema: str,
) -> None:
    with PostgresStore(schema_url(schema), pool_min=1, pool_max=1) as store:
        store.append([submitted("before")])
        with store._db.connection() as conn:  # the pool's one connection, as if demoted
            conn.execute("SET default_transaction_read_only = on")
        store.append([submitted("after")])  # 25006, the pool replaced, written on a new one
        assert store.metrics["reconnects"] == 1 and store.metrics["retries"] >= 1
        assert [e.position for e in store.read(0)] == [1, 2]
        assert store.state().writable


def test_the_listeners_probe_moves_an_idle_pool_off_a_node_that_turned_read_only(
    schema: str,
) -> None:
    # A read-only primary takes the NOTIFY (and its own listener hears it): the probe's
    # session reports the server's role, and the pool is replaced without any write.
    with PostgresStore(schema_url(schema), pool_min=1, pool_max=1) as store:
        with store._db.connection() as conn:
            conn.execute("SET default_transaction_read_only = on")
        store._notify("watchdog")  # what the silence watchdog sends
        assert store.metrics["reconnects"] == 1  # (its new connections said writable since)
        store.append([submitted("after")])  # on the new pool's connection
        assert store.state().writable
