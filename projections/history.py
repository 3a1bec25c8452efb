"""The history projection: what happened to each Work and attempt, and at which positions.

Where the scheduler projection keeps the *current* state of a Work, this one keeps its
story, every fact with the log position (and recorded time) of the event that caused it:
per attempt its segments with their launch phases and invoke marker, renewals, releases,
recoveries, outcomes and stop evidence; per Work its holds (held and released), failures,
retry timers (armed, due, fired), manual retry requests and cancellation. `rota explain`
cites these positions.

A deterministic fold like the scheduler's: time only from events, nothing appended, so a
rebuild equals the live one (`digest()`). Persisted as rows `work/<id>` (a `WorkHistory`)
and `attempt/<id>/<n>` (an `AttemptHistory`); `apply` records the keys it changed in
`dirty`. With a `loader` (a function from a row key to its stored bytes) the projection
reads the rows an event touches on demand, so it can be kept current from a projection
store without holding every Work's history in memory (`evict()` after a save).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import msgspec

from rota.domain.events import Event, LeaseRenewed, WorkSubmitted
from rota.projections.history_attempts import ATTEMPT_ROW, about_attempt, attempt_row, renew
from rota.projections.history_rules import ROUTES, route_for
from rota.projections.records import AttemptHistory, Mark, WorkHistory, encoder

Loader = Callable[[str], bytes | None]
Saver = Callable[[Iterable[tuple[str, bytes]]], None]
_work_decoder = msgspec.json.Decoder(WorkHistory)
_attempt_decoder = msgspec.json.Decoder(AttemptHistory)
WORK_ROW = "work/"


def _newest(held: list[tuple[str, Any, Any]], among: set[str], count: int) -> list[Any]:
    """The last `count` of the `held` rows (key first) whose key is in `among`, newest
    first."""
    return list(itertools.islice((row for row in reversed(held) if row[0] in among), count))


def _first(row: tuple[str, Any]) -> str:
    return row[0]


class HistoryProjection:
    """Per Work and attempt, every fact with its log position; see the module docstring."""

    name = "history"
    version = 1

    def __init__(self, loader: Loader | None = None) -> None:
        self.position = 0
        self.works: dict[str, WorkHistory] = {}
        self.attempts: dict[tuple[str, int], AttemptHistory] = {}
        self.dirty: set[str] = set()
        self.loader = loader

    # -- reading rows (from memory, else from the loader) -----------------------------

    def work(self, work_id: str) -> WorkHistory | None:
        found = self.works.get(work_id)
        if found is None and self.loader is not None:
            raw = self.loader(WORK_ROW + work_id)
            if raw is not None:
                found = self.works[work_id] = _work_decoder.decode(raw)
        return found

    def attempt(self, work_id: str, number: int) -> AttemptHistory | None:
        found = self.attempts.get((work_id, number))
        if found is None and self.loader is not None:
            raw = self.loader(attempt_row(work_id, number))
            if raw is not None:
                found = self.attempts[(work_id, number)] = _attempt_decoder.decode(raw)
        return found

    def attempts_of(self, work_id: str) -> list[AttemptHistory]:
        work = self.work(work_id)
        count = work.attempts if work is not None else 0
        return [a for n in range(1, count + 1) if (a := self.attempt(work_id, n)) is not None]

    def evict(self, keep: Container[str] = ()) -> None:
        """Forget the rows held in memory (after they were saved), but those of the Works
        in `keep` (the active ones, about to be read again); needs a loader."""
        if self.loader is None:
            raise ValueError("evict() would lose rows: this history has no loader")
        if not keep:
            self.works.clear()
            self.attempts.clear()
            return
        self.works = {w: h for w, h in self.works.items() if w in keep}
        self.attempts = {k: a for k, a in self.attempts.items() if k[0] in keep}

    def spill(self, save: Saver, keep: int = 0) -> None:
        """Hand the changed rows (`dirty`) to `save`, in key order, and forget the rows held
        (needs a loader), but for the `keep` newest changed ones (last created or read
        back, half Works and half attempts, which the next events are the likeliest to
        touch again): they stay in memory unsaved, and stay in `dirty`."""
        if self.loader is None:
            raise ValueError("spill() would lose rows: this history has no loader")
        dirty, encode = self.dirty, encoder.encode
        # Each held row's key is made once, here, and its value encoded from the record
        # held (a bulk fold spills some 20,000 rows a time: `row(key)` would parse every
        # key back to find its record).
        works = [(WORK_ROW + w, w, h) for w, h in self.works.items()]
        attempts = [(attempt_row(*a), a, h) for a, h in self.attempts.items()]
        kept_works = _newest(works, dirty, keep // 2) if keep > 0 else []
        kept_attempts = _newest(attempts, dirty, keep - keep // 2) if keep > 0 else []
        kept = {key for key, _, _ in kept_works} | {key for key, _, _ in kept_attempts}
        going: list[tuple[str, Any]] = [
            (key, held)
            for held_rows in (works, attempts)
            for key, _, held in held_rows
            if key in dirty and key not in kept
        ]
        if len(going) + len(kept) < len(dirty):  # a changed row not held (none, in a fold)
            written = {key for key, _ in going} | kept
            going += [(key, value) for key, value in self._rows(dirty - written)]
        going.sort(key=_first)
        # Encoded as `save` takes them (a row not held comes encoded already).
        save((key, held if isinstance(held, bytes) else encode(held)) for key, held in going)
        self.works = {w: h for _, w, h in reversed(kept_works)}
        self.attempts = {a: h for _, a, h in reversed(kept_attempts)}
        self.dirty = kept

    def _rows(self, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        for key in keys:
            value = self.row(key)
            if value is not None:
                yield key, value

    # -- the fold ---------------------------------------------------------------------

    def apply(self, position: int, stream: str, version: int, at: datetime, event: Event) -> None:
        if position <= self.position:
            return
        self.position = position
        if stream.startswith("turns/"):
            work_id, _, number = str(getattr(event, "execution", "")).rpartition("/")
            if number.isdigit() and (found := self.attempt(work_id, int(number))) is not None:
                found.marks.append(Mark(event.tag(), position, at))
                self.dirty.add(attempt_row(work_id, int(number)))
            return
        if not stream.startswith(WORK_ROW):
            return
        work_id = stream[len(WORK_ROW) :]
        # A held Work by a plain lookup; else read on demand (`work`), but for the first
        # event of a stream, which has no history before it.
        work = self.works.get(work_id)
        if work is None and version != 1:
            work = self.work(work_id)
        if isinstance(event, WorkSubmitted):
            if work is None:
                # Its first input, when it carries one, counts as an input at this position.
                carried = event.input is not None
                self.works[work_id] = WorkHistory(
                    work_id=work_id,
                    submitted=position,
                    submitted_at=at,
                    inputs=1 if carried else 0,
                    last_input=position if carried else None,
                )
                self.dirty.add(stream)
            return
        if work is None:
            return
        route = ROUTES.get(type(event))  # (`_apply`, inlined: one call less an event)
        if route is None:
            route = route_for(type(event))
        if route is not about_attempt:
            # An event about one attempt changes that attempt's row, and the Work's only
            # when it says so (`about_attempt`): a Work claimed before a save and invoked,
            # renewed or completed after it does not write its Work row again.
            self.dirty.add(stream)
        route(self, work, position, at, event)

    def fold_page(self, records: Sequence[Any], times: Sequence[datetime], stop: int) -> None:
        """Apply a page of recorded events (position order, each with its parsed recorded
        time) up to position `stop`, as `apply` would, for a bulk fold from the log: the
        common case (an event of a Work already known) inlined, and a run of lease
        renewals of one attempt folded as one (they only count, and move the last renewal's
        position and expiry): kept here per Work, applied before that Work's next other
        event and at the end of the page."""
        works, attempts, dirty, routes = self.works, self.attempts, self.dirty, ROUTES
        renewals: dict[str, tuple[int, int, int, datetime]] = {}
        for record, at in zip(records, times, strict=True):
            position = record.position
            if position > stop:
                break
            stream, event = record.stream, record.event
            work_id = stream[5:] if stream.startswith(WORK_ROW) else ""
            renewal = type(event) is LeaseRenewed and position > self.position
            if work_id in renewals:
                number, count, _, _ = renewals[work_id]
                if renewal and number == event.attempt:
                    renewals[work_id] = (number, count + 1, position, event.lease_expires_at)
                    self.position = position
                    continue
                self._renewed(work_id, *renewals.pop(work_id))
            work = works.get(work_id) if work_id else None
            if work is None or position <= self.position or type(event) is WorkSubmitted:
                self.apply(position, stream, record.version, at, event)
                continue
            self.position = position
            dirty.add(stream)
            if renewal and (work_id, event.attempt) in attempts:
                renewals[work_id] = (event.attempt, 1, position, event.lease_expires_at)
                continue
            route = routes.get(type(event))
            if route is None:
                route = route_for(type(event))
            route(self, work, position, at, event)
        for work_id, pending in renewals.items():
            self._renewed(work_id, *pending)

    def _renewed(
        self, work_id: str, number: int, count: int, position: int, expiry: datetime
    ) -> None:
        """`count` renewals of attempt `number`, the last at `position` (see `fold_page`)."""
        renew(self.attempts[(work_id, number)], count, position, expiry)
        self.dirty.add(attempt_row(work_id, number))

    def settle(self) -> None:
        """Nothing to derive after `fold_page` (the history keeps no indices)."""

    def _apply(self, work: WorkHistory, position: int, at: datetime, event: Event) -> None:
        kind = type(event)
        route = ROUTES.get(kind)
        if route is None:
            route = route_for(kind)
        route(self, work, position, at, event)

    # -- digest and persistence ---------------------------------------------------------

    def row(self, key: str) -> bytes | None:
        """The encoded value of one row (None: no such row)."""
        if key.startswith(WORK_ROW):
            found: Any = self.work(key[len(WORK_ROW) :])
        elif key.startswith(ATTEMPT_ROW):
            work_id, _, number = key[len(ATTEMPT_ROW) :].rpartition("/")
            found = self.attempt(work_id, int(number)) if number.isdigit() else None
        else:
            raise KeyError(f"no row {key!r} in the history projection")
        return None if found is None else encoder.encode(found)

    def rows_of(self, keys: Iterable[str]) -> Iterator[tuple[str, bytes | None]]:
        """`(key, row(key))` for each of `keys`, in their order: what a save writes, a held
        record's row encoded without the calls `row` makes for any key."""
        works, attempts, encode = self.works, self.attempts, encoder.encode
        for key in keys:
            found: Any = None
            if key.startswith(WORK_ROW):
                found = works.get(key[5:])
            elif key.startswith(ATTEMPT_ROW):
                work_id, _, number = key[8:].rpartition("/")
                if number.isdigit():
                    found = attempts.get((work_id, int(number)))
            yield key, self.row(key) if found is None else encode(found)

    def row_keys(self) -> Iterator[str]:
        """The keys of the rows held in memory."""
        for work_id in self.works:
            yield WORK_ROW + work_id
        for work_id, number in self.attempts:
            yield attempt_row(work_id, number)

    def digest(self) -> str:
        """A canonical SHA-256 of every row (in memory) and the position."""
        rows = ((key, self.row(key) or b"") for key in sorted(self.row_keys()))
        return self.digest_rows(rows, self.position)

    @staticmethod
    def digest_rows(rows: Iterable[tuple[str, bytes]], position: int) -> str:
        """The digest of a history projection at `position` whose encoded rows are `rows`
        (key and value, in key order)."""
        h = hashlib.sha256()
        update = h.update
        for key, value in rows:
            update(b"%s\n%s\n" % (key.encode(), value))  # one call a row (millions of rows)
        update(f"|{position}".encode())
        return h.hexdigest()

    @classmethod
    def from_rows(
        cls, position: int, rows: Iterable[tuple[str, bytes]], loader: Loader | None = None
    ) -> HistoryProjection:
        self = cls(loader)
        self.position = position
        for key, value in rows:
            if key.startswith(WORK_ROW):
                work = _work_decoder.decode(value)
                self.works[work.work_id] = work
            elif key.startswith(ATTEMPT_ROW):
                attempt = _attempt_decoder.decode(value)
                self.attempts[(attempt.work_id, attempt.number)] = attempt
            else:
                raise KeyError(f"no row {key!r} in the history projection")
        return self
