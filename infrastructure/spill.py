"""Optimisation: a fold from position 0 in memory bounded by the active Works, not by every
Work ever submitted (bench replay).

Rows a fold from position 0 sets aside as it goes, so its memory does not grow with the
number of Works: a scratch SQLite file per fold, and the projections' spilling around it.

A rebuild folds every Work ever submitted. Held in memory, that is about 6 KiB per Work
(2 GB at 300k Works); here the fold holds a bounded number and writes the rest to a
`SpillFile` (one `(key, value)` table in key order: the very rows the projection store
will hold):
- the scheduler projection's Works are a `SpilledWorks`: when more than `hold` are in
  memory after a page, the quiet ones (which name no index: `is_quiet`) are written out
  and dropped, and one is read back (decoded from its row) if a later event touches it;
  active Works stay, so the indices derived at the end are the fold's own;
- the history projection reads its rows through the spill (`loader`), and when it holds
  more than `hold` rows after a page (besides those it kept), writes the changed ones out
  and evicts them, but for the `hold` newest changed ones, which stay unwritten: a Work's
  lifecycle often spans a page boundary, so most rows are written once, when they go.
At the end (`finish`) every row left in memory is written out too; the spill file then
holds the whole projection in key order, and `SpilledRows` hands it to
`ProjectionStore.replace` one row at a time, with the digest computed from the same rows
(equal to the digest of the projection folded in memory: a test compares them).

A scratch spill file has no journal and no fsync, and is deleted with its directory by the
caller. A rebuild into an SQLite projection file that no other connection has open spills
the fold it runs in its own process into a staging table in that file instead
(`SpillFile(..., staged=True)`, made by `SQLiteProjectionStore.staging`), journaled and
synced like the file's other writes, which the swap renames into place: each of those rows
is then written once, not once here and again by the swap's copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import apsw

from rota.domain.state import WorkState
from rota.projections.history import HistoryProjection
from rota.projections.scheduler import WORK_ROW, OnDemandWorks, SchedulerProjection, is_quiet
from rota.projections.scheduler_rows import other_keys
from rota.projections.work_rows import WorkCodec

# Works (or history rows) a fold keeps in memory before it spills. The history keeps as
# many of its newest changed rows unwritten besides: at 5,000, a log whose Works' lifecycles
# span 4,000 Works read 75k of 200k Works' rows back and wrote 477k rows for 402k; at 10,000
# none, for about 11 MiB more (bench/RESULTS.md).
HOLD = 10_000
BLOOM_BITS = 1 << 24
BLOOM_MASK = BLOOM_BITS - 1


class SpillFile:
    """One scratch table of rows, `(key, value)` in key order; see the module docstring.

    By default a scratch file of its own (`table` "rows"). With `staged`, `table` is a
    staging table in a projection file, made by the projection store
    (`SQLiteProjectionStore.staging`), which the swap renames into place instead of
    copying its rows: the file is then not scratch, and every write is journaled and
    synced as the file's other writes are.
    """

    def __init__(self, path: str | Path, table: str = "rows", *, staged: bool = False) -> None:
        self.path, self.table, self.staged = Path(path), table, staged
        self._conn = apsw.Connection(str(self.path))
        if staged:
            # Another connection (a reader that opened the file meanwhile) may hold it:
            # wait, as the store's own connection does. Beside the projection file's own
            # tables (the store set its rollback journal, `staging`), a crash or power cut
            # mid-write must leave them intact, so FULL.
            self._conn.setbusytimeout(30_000)
            self._conn.execute("PRAGMA synchronous=FULL")
            found = self._conn.execute(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()
            if found is None:
                raise ValueError(f"no staging table {table!r} in {self.path}")
        self._conn.execute("PRAGMA cache_size=-8192")
        if not staged:
            # Rows of about a KiB in a WITHOUT ROWID table on the default 4 KiB pages spill
            # to overflow pages and leave them mostly empty (a file 4x its rows, written 3x
            # slower: bench/RESULTS.md); 16 KiB pages hold several rows each. Set before
            # the table exists (it is a no-op on a file already written).
            self._conn.execute("PRAGMA page_size=16384")
            self._conn.execute("PRAGMA journal_mode=OFF")
            self._conn.execute("PRAGMA synchronous=OFF")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS rows (key TEXT PRIMARY KEY, value BLOB NOT NULL) "
                "WITHOUT ROWID"
            )
        self._put_sql = (
            f"INSERT INTO {table} (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        self._get_sql = f"SELECT value FROM {table} WHERE key = ?"
        self.writes = 0
        # A Bloom filter of the keys written (two bits per key of a 2**24-bit array, 2 MiB):
        # most lookups are of keys never spilled (the first event of each Work), answered
        # without a query; a false positive (about 1% at a million keys) costs one query.
        self._bits = bytearray(BLOOM_BITS // 8)

    def where(self) -> tuple[str, str, bool]:
        """Where it is (path, table, whether staged): what another process opens it by."""
        return str(self.path), self.table, self.staged

    def may_hold(self, key: str) -> bool:
        # The two bits `_marked` sets, tested inline (this runs once per event of a Work the
        # fold does not hold).
        h, bits = hash(key), self._bits
        low, high = h & BLOOM_MASK, (h >> 24) & BLOOM_MASK
        return bool(bits[low >> 3] >> (low & 7) & 1 and bits[high >> 3] >> (high & 7) & 1)

    def put(self, rows: Iterable[tuple[str, bytes]]) -> None:
        """Write (or overwrite) rows, in one transaction."""
        with self._conn:
            self._conn.executemany(self._put_sql, self._marked(rows))
        self.writes += 1

    def _marked(self, rows: Iterable[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
        # `_mark`'s two bits, set inline: this runs for every row a fold spills.
        bits = self._bits
        for row in rows:
            h = hash(row[0])
            low, high = h & BLOOM_MASK, (h >> 24) & BLOOM_MASK
            bits[low >> 3] |= 1 << (low & 7)
            bits[high >> 3] |= 1 << (high & 7)
            yield row

    def get(self, key: str) -> bytes | None:
        if not self.may_hold(key):
            return None
        found = self._conn.execute(self._get_sql, (key,)).fetchone()
        return None if found is None else bytes(found[0])

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every row in key order, read as iterated."""
        # As stored: every key is TEXT and every value a BLOB (`put`), so str and bytes.
        yield from self._conn.execute(f"SELECT key, value FROM {self.table} ORDER BY key")

    def values_under(self, prefix: str) -> Iterator[bytes]:
        """The values of the rows whose key starts with `prefix`, in key order."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        query = f"SELECT value FROM {self.table} WHERE key >= ? AND key < ? ORDER BY key"
        for (value,) in self._conn.execute(query, (prefix, end)):
            yield value

    def count(self) -> int:
        found = self._conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()
        return int(found[0]) if found else 0

    def close(self) -> None:
        with contextlib.suppress(apsw.Error):
            self._conn.close()


class SpilledWorks(OnDemandWorks):
    """The Works of a fold: those held in memory, the rest in a `SpillFile`."""

    def __init__(self, spill: SpillFile, codec: WorkCodec) -> None:
        super().__init__()
        self.spill, self.codec = spill, codec
        self.peak = 0  # the most Works held at once (checked after each page)
        self.read_back = 0  # Works read back from the spill

    def _fetch(self, work_id: str) -> WorkState | None:
        raw = self.spill.get(WORK_ROW + work_id)
        if raw is None:
            return None
        work = self.codec.decode(raw)
        dict.__setitem__(self, work_id, work)
        self.read_back += 1
        return work

    def spill_out(self, which: Callable[[WorkState], bool]) -> int:
        """Write the held Works `which` selects to the spill and drop them; how many."""
        self.peak = max(self.peak, dict.__len__(self))
        gone = [work for work in dict.values(self) if which(work)]
        encode = self.codec.encode
        self.spill.put((WORK_ROW + work.work_id, encode(work)) for work in gone)
        for work in gone:
            dict.__delitem__(self, work.work_id)
        return len(gone)


class Spiller:
    """Keeps one fresh projection's memory bounded while it folds (see the module
    docstring): `page_done()` after each page, `finish()` once at the end."""

    def __init__(self, projection: Any, spill: SpillFile, hold: int | None = None) -> None:
        self.projection, self.spill = projection, spill
        self.hold = self.limit = HOLD if hold is None else hold
        self.peak = 0  # the most Works (history: rows) held after any page
        if isinstance(projection, SchedulerProjection):
            projection.works = SpilledWorks(spill, projection.codec)
        elif isinstance(projection, HistoryProjection):
            projection.loader = spill.get

    def held(self) -> int:
        projection = self.projection
        if isinstance(projection, SchedulerProjection):
            return dict.__len__(projection.works)
        return len(projection.works) + len(projection.attempts)

    def page_done(self) -> None:
        projection = self.projection
        if isinstance(projection, SchedulerProjection):
            # A fresh fold is written whole (`replace`): its changed keys need no record,
            # and kept they would grow with every Work folded.
            projection.dirty.clear()
        held = self.held()
        self.peak = max(self.peak, held)
        if held <= self.limit:
            return
        if isinstance(projection, SchedulerProjection):
            works = projection.works
            assert isinstance(works, SpilledWorks)
            works.spill_out(is_quiet)
            # Active Works stay: if they alone fill most of the limit, spill less often.
            self.limit = max(self.hold, 2 * self.held())
        else:
            self._spill_history(projection, keep=self.hold)
            # The rows kept (`_spill_history`) count beside the hold, not in it.
            self.limit = self.hold + self.held()

    def _spill_history(self, history: HistoryProjection, keep: int) -> None:
        """Write out and forget the rows held, but for the `keep` newest changed ones: a
        Work's lifecycle often spans a page boundary, and those rows would otherwise be
        written now, read back a page later and written again (this way most are written
        once, when they go)."""
        history.spill(self.spill.put, keep)

    def finish(self) -> SpilledRows:
        """Write every row left in memory to the spill; the projection as rows to store."""
        projection = self.projection
        self.peak = max(self.peak, self.held())
        if isinstance(projection, SchedulerProjection):
            projection.settle()  # the indices, from the Works held (every active one)
            works = projection.works
            assert isinstance(works, SpilledWorks)
            works.spill_out(lambda work: True)
            # After the last Works are encoded: every binding they pin is known.
            self.spill.put(
                (key, value)
                for key in other_keys(projection)
                if (value := projection.row(key)) is not None
            )
            digest = projection.digest_of(self.spill.values_under(WORK_ROW))
        else:
            self._spill_history(projection, keep=0)
            digest = HistoryProjection.digest_rows(self.spill.items(), projection.position)
        rows = SpilledRows(
            projection.name, projection.version, projection.position, self.spill, digest
        )
        rows.peak_held = self.peak
        return rows


class SpilledRows:
    """A projection folded with spilling, as the rows a projection store writes: what
    `ProjectionStore.replace` uses of a projection (`name`, `version`, `position`, `dirty`,
    `row`, `row_keys`, `digest`), read from the spill file in key order as it goes."""

    def __init__(
        self, name: str, version: int, position: int, spill: SpillFile, digest: str
    ) -> None:
        self.name, self.version, self.position = name, version, position
        self.spill = spill
        self._digest = digest
        self.dirty: set[str] = set()
        self.peak_rss_mib: float | None = None
        self.peak_held = 0  # the most Works (history: rows) the fold held after a page
        self._current: tuple[str, bytes] | None = None

    def row_keys(self) -> Iterator[str]:
        for key, value in self.spill.items():
            self._current = (key, value)
            yield key
        self._current = None

    def row(self, key: str) -> bytes | None:
        current = self._current
        if current is not None and current[0] == key:
            return current[1]
        return self.spill.get(key)

    @property
    def row_count(self) -> int:
        return self.spill.count()

    def digest(self) -> str:
        return self._digest


__all__ = ["HOLD", "SpillFile", "SpilledRows", "SpilledWorks", "Spiller"]
