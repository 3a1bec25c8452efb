"""Appending to the PostgreSQL log: under the head lock, versions checked, rows chained.

An append encodes its events, then in one write transaction (`PostgresStore.write`) locks
the head and reads, in that round trip, the versions of the streams it touches and the
delivery identities already recorded; stale expected versions are `ConcurrencyConflict`
(counted in `metrics["conflicts"]`), and an event whose identity is recorded answers with
the original. The rows are chained from the head's hash and inserted with the COMMIT.

A retry after a lost commit acknowledgement (the connection dropped during COMMIT) runs the
append again: an event with a delivery identity is then found recorded and returned
(`written == 0`), so it is recorded exactly once. An event without one is protected only by
expected versions, which turn the duplicate into `ConcurrencyConflict`; with neither it
would be written twice (and in a partly duplicate append, only the events with an identity
are deduplicated), so give every transition that can be retried a delivery identity.

Import: `append_raw` (what `rota import` uses) takes the same head lock, checks that the
rows continue the log (first position head + 1, every hash recomputed from the row and the
previous hash), inserts them with their own positions, times and hashes, and moves the head
row, all in one transaction. Appends and imports keep the Merkle tree in the same transaction
(`tree.grow`: its nodes' INSERT goes with the rows'). Imported times are the source store's:
if its clock ran ahead of the database's, the first events appended afterwards carry earlier
times than the last imported ones (positions, not times, order the log).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from rota.application.errors import ConcurrencyConflict, DeliveryConflict
from rota.application.ports import AppendResult, NewEvent, RawRecord, RecordedEvent
from rota.application.timestamps import format_timestamp
from rota.infrastructure.chain import check_continuation
from rota.infrastructure.codec import Codec
from rota.infrastructure.deliveries import match_deliveries
from rota.infrastructure.log_rows import Row, chain_values, prepared_rows, recorded_events
from rota.infrastructure.postgres.log_sql import LogStatements, json_literal
from rota.infrastructure.postgres.transactions import Tx
from rota.infrastructure.postgres.tree import grow

T = TypeVar("T")


class Write(Protocol):
    """The store's write transaction (`PostgresStore.write`)."""

    def __call__(
        self, body: Callable[[Tx], T], *, lock: bool = False, with_lock: Sequence[str] = ()
    ) -> T: ...


class LogAppends:
    """The appends of the log in one schema; see the module docstring."""

    def __init__(
        self,
        write: Write,
        statements: LogStatements,
        channel: str,
        codec: Codec,
        decode_rows: Callable[[list[Any]], list[RecordedEvent]],
        count: Callable[[str], None],
    ) -> None:
        self.write = write
        self.codec = codec
        self._sql, self._channel = statements, channel
        self._schema = statements.schema
        self._decode_rows, self._count = decode_rows, count

    def append(
        self, events: Sequence[NewEvent], expected: Mapping[str, int] | None = None
    ) -> AppendResult:
        wanted = dict(expected or {})
        prepared = prepared_rows(self.codec, events)
        if not prepared and not wanted:
            return AppendResult([], 0)
        # Read under the lock, in the round trip that takes it: the recorded delivery
        # identities and the version of every stream the append may touch.
        ids = list({row.delivery_id for _, row in prepared if row.delivery_id is not None})
        streams = list(set(wanted) | {row.stream for _, row in prepared})
        reads = [self._sql.versions.format(json_literal(streams))]
        if ids:
            reads.append(self._sql.deliveries.format(json_literal(ids)))
        try:
            recorded, written = self.write(
                lambda tx: self._append_in(tx, prepared, wanted), lock=True, with_lock=reads
            )
        except ConcurrencyConflict:
            self._count("conflicts")
            raise
        except DeliveryConflict:
            self._count("delivery_conflicts")
            raise
        # New events come back as a read will see them, after the commit, so the log's lock
        # is not held for any decoding.
        return AppendResult(recorded_events(self.codec, recorded), written)

    def _append_in(
        self, tx: Tx, prepared: list[tuple[NewEvent, Row]], expected: dict[str, int]
    ) -> tuple[list[RecordedEvent | tuple[int, Row, str]], int]:
        versions = {str(stream): int(version or 0) for stream, version in tx.prefetched[0]}
        found = {r[5]: r for r in tx.prefetched[1]} if len(tx.prefetched) > 1 else {}
        deliveries = match_deliveries(
            [new for new, _ in prepared],
            lambda d: self._decode_rows([found[d]])[0] if d in found else None,
        )
        duplicates = deliveries.all_recorded()
        if duplicates is not None:
            return [*duplicates], 0

        for stream, want in expected.items():
            if versions[stream] != want:
                raise ConcurrencyConflict(stream, want, versions[stream])
        fresh = [r for i, (_, r) in enumerate(prepared) if deliveries.is_new(i)]
        for row in fresh:
            row.version = versions[row.stream] = versions[row.stream] + 1
        return deliveries.merge(self.insert_rows(tx, fresh, defer=True)), len(fresh)

    def insert_rows(
        self, tx: Tx, rows: Sequence[Row], *, defer: bool = False
    ) -> list[tuple[int, Row, str]]:
        """Chain and insert rows whose versions are set, under the head lock; inside `write`.

        With `defer`, the INSERT is sent with the COMMIT (one round trip less).
        """
        if not rows:
            return []
        position, head_hash, when = tx.head()
        previous = bytes.fromhex(head_hash)
        recorded_at = format_timestamp(when)
        values, digest = chain_values(rows, position, previous, recorded_at)
        # The INSERT takes a column at a time (arrays): the key columns, the payload as
        # text or bytes, the hash.
        columns: list[list[Any]] = [values[i::9] for i in range(6)]
        data = values[6::9]
        columns.append([d if isinstance(d, str) else None for d in data])
        columns.append([None if isinstance(d, str) else bytes(d) for d in data])
        columns.append(values[8::9])
        written = [
            (position, row, recorded_at) for position, row in zip(columns[0], rows, strict=True)
        ]
        position = written[-1][0]
        params = (recorded_at, *columns, position, digest.hex(), self._channel, str(position))
        if defer:
            tx.deferred.append((self._sql.insert, params))
        else:
            tx.cursor.execute(self._sql.insert, params)
        old_size = written[0][0] - 1
        if old_size >> 8 != position >> 8:  # a block of 256 leaves completes: tree nodes
            grow(tx, self._schema, old_size, columns[8], defer=defer)
        tx.wrote_up_to(position, digest.hex(), when)
        return written

    def append_raw(self, records: Sequence[RawRecord]) -> None:
        """Import rows exactly as recorded elsewhere; see `EventStore.append_raw`.

        Under the head lock, like `append`: the first position must be head + 1 and its hash
        must link to the head's hash; every hash is recomputed; one transaction, which also
        moves the head row and wakes waiters. A retry after a lost commit acknowledgement
        that finds these very rows recorded (the head is the last record) is a no-op.
        """
        if records:
            rows = list(records)
            self.write(lambda tx: self._append_raw_in(tx, rows), lock=True)

    def _append_raw_in(self, tx: Tx, records: list[RawRecord]) -> None:
        position, head_hash, when = tx.head()
        last = records[-1]
        if tx.retrying and (position, head_hash) == (last.position, last.hash):
            return  # an earlier attempt committed these rows; its acknowledgement was lost
        check_continuation(position, head_hash, records)
        old_size = position
        columns: list[list[Any]] = [[] for _ in range(10)]
        for record in records:
            key = (
                record.position,
                record.stream,
                record.version,
                record.type,
                record.type_version,
                record.delivery_id,
            )
            data = record.data
            text, blob = (data, None) if isinstance(data, str) else (None, bytes(data))
            values = (*key, text, blob, record.recorded_at, record.hash)
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        position = last.position
        params = (*columns, position, last.hash, self._channel, str(position))
        tx.deferred.append((self._sql.import_, params))  # sent with the COMMIT
        grow(tx, self._schema, old_size, [r.hash for r in records], defer=True)
        tx.wrote_up_to(position, last.hash, when)
